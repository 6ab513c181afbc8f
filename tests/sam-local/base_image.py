"""Build the base image `sam local` runs the functions in, offline, as a
`docker load` archive.

SAM builds its invoke image FROM public.ecr.aws/lambda/provided:al2023-<arch>
plus the runtime interface emulator it ships, and needs only /bin/sh, mv and
chmod in the base for that. No registry is reachable here, so this base is made
from Debian packages instead: libc6 and libgcc-s1 (what a Rust binary links),
busybox-static (the shell and tools), and the host's CA bundle (the AWS SDK
refuses to start without root certificates, even for http endpoints). About
6 MB. `docker import` cannot set an image's architecture (it records the
daemon's), and SAM builds with --platform, so this writes the archive, with
its config, itself.

Differences from provided.al2023 that matter: Debian 12's glibc is 2.36, the
real image's 2.34 (scripts/sam-local.sh checks that no bootstrap needs more
than GLIBC_2.34), and there is no Amazon Linux userland (a function that runs
dnf or other programs would not find them).

    python base_image.py --arch arm64 --debs DIR --ca-bundle FILE --tag TAG --out FILE.tar
"""

import argparse
import hashlib
import io
import json
import subprocess
import tarfile
import tempfile
from pathlib import Path

# Applets the image gets as /bin links: SAM's Dockerfile runs `mv` and `chmod`
# through /bin/sh (on the emulator it ADDs into /var/rapid/, which must be a
# folder); the rest help when debugging inside a container.
APPLETS = ["sh", "mv", "chmod", "cp", "rm", "mkdir", "ls", "cat", "ln", "env", "echo", "true", "sleep"]
# Parts of the packages no function uses.
SKIP_PREFIXES = ("./usr/share/", "./usr/lib/aarch64-linux-gnu/gconv/", "./usr/lib/x86_64-linux-gnu/gconv/")
FIXED_MTIME = 1_700_000_000
DOCKER_ARCH = {"arm64": ("arm64", "v8"), "x86_64": ("amd64", None)}


def package_members(deb):
    """The file system tree of one .deb, as tar members with their data."""
    out = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(out), mode="r:") as tar:
        for member in tar.getmembers():
            data = tar.extractfile(member).read() if member.isreg() else None
            yield member, data


def add(layer, seen, info, data=None):
    if info.name in seen:
        return
    seen.add(info.name)
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    layer.addfile(info, io.BytesIO(data) if data is not None else None)


def entry(name, kind, mode, target="", data=None):
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime, info.linkname = kind, mode, FIXED_MTIME, target
    if data is not None:
        info.size = len(data)
    return info


def build_layer(path, debs, ca_bundle):
    seen = set()
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as layer:
        for deb in debs:
            for member, data in package_members(deb):
                if member.name.startswith(SKIP_PREFIXES):
                    continue
                add(layer, seen, member, data)
        for d in ["./bin", "./etc", "./etc/ssl", "./etc/ssl/certs", "./opt", "./var", "./var/rapid", "./var/task", "./var/runtime"]:
            add(layer, seen, entry(d, tarfile.DIRTYPE, 0o755))
        add(layer, seen, entry("./tmp", tarfile.DIRTYPE, 0o1777))
        for applet in APPLETS:
            add(layer, seen, entry(f"./bin/{applet}", tarfile.SYMTYPE, 0o777, "busybox"))
        bundle = Path(ca_bundle).read_bytes()
        add(layer, seen, entry("./etc/ssl/certs/ca-certificates.crt", tarfile.REGTYPE, 0o644, data=bundle), bundle)
        for name, text in (("passwd", "root:x:0:0:root:/root:/bin/sh\n"), ("group", "root:x:0:\n")):
            data = text.encode()
            add(layer, seen, entry(f"./etc/{name}", tarfile.REGTYPE, 0o644, data=data), data)
    if "./bin/busybox" not in seen or not any("libc.so.6" in n for n in seen):
        raise SystemExit("base image: busybox or libc6 missing from the packages given")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", choices=sorted(DOCKER_ARCH), required=True)
    parser.add_argument("--debs", required=True, help="folder with the libc6, libgcc-s1 and busybox-static .debs")
    parser.add_argument("--ca-bundle", required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    debs = sorted(Path(args.debs).glob("*.deb"))
    with tempfile.TemporaryDirectory() as tmp:
        layer_path = Path(tmp) / "layer.tar"
        build_layer(layer_path, debs, args.ca_bundle)
        layer_bytes = layer_path.read_bytes()
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    arch, variant = DOCKER_ARCH[args.arch]
    config = {
        "architecture": arch,
        "os": "linux",
        "created": "2023-11-14T22:13:20Z",
        "config": {
            "Env": [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "LAMBDA_TASK_ROOT=/var/task",
                "LAMBDA_RUNTIME_DIR=/var/runtime",
            ],
            "WorkingDir": "/var/task",
            "Cmd": ["/bin/sh"],
        },
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [
            {
                "created": "2023-11-14T22:13:20Z",
                "created_by": "tests/sam-local/base_image.py: " + ", ".join(d.name for d in debs) + " + CA bundle",
            }
        ],
    }
    if variant:
        config["variant"] = variant
    config_bytes = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_bytes).hexdigest() + ".json"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [args.tag], "Layers": ["layer/layer.tar"]}]).encode()

    with tarfile.open(args.out, "w") as image:
        for name, data in ((config_name, config_bytes), ("layer/layer.tar", layer_bytes), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), FIXED_MTIME, 0o644
            image.addfile(info, io.BytesIO(data))
    print(f"base image: {args.tag} ({arch}, {len(layer_bytes) // 1024} KiB layer) -> {args.out}")


if __name__ == "__main__":
    main()
