"""Write the template `sam local` runs in `make sam-local`: template.yaml with
each function's CodeUri pointing at the folder that holds its built
`bootstrap` (what `sam build` writes to .aws-sam/build/template.yaml), and its
architecture set to the one that was built. Everything else is unchanged.

    python built_template.py --template template.yaml --code DIR --arch arm64 --out FILE
"""

import argparse
from pathlib import Path

from samcli.yamlhelper import yaml_dump, yaml_parse


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--template", required=True)
    parser.add_argument("--code", required=True, help="folder with one sub-folder per function (its logical id)")
    parser.add_argument("--arch", choices=["arm64", "x86_64"], required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    template = yaml_parse(Path(args.template).read_text())
    globals_function = template.get("Globals", {}).get("Function", {})
    if "Architectures" in globals_function:
        globals_function["Architectures"] = [args.arch]
    for name, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Serverless::Function":
            continue
        code = Path(args.code) / name
        if not (code / "bootstrap").is_file():
            raise SystemExit(f"built template: {code}/bootstrap is missing")
        resource["Properties"]["CodeUri"] = str(code)
        if "Architectures" in resource["Properties"]:
            resource["Properties"]["Architectures"] = [args.arch]
        # Built already: nothing for `sam build` to do with this copy.
        resource.pop("Metadata", None)
    Path(args.out).write_text(yaml_dump(template))


if __name__ == "__main__":
    main()
