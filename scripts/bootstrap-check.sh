# shellcheck shell=bash
# Sourced by scripts/sam-local.sh and scripts/deploy-check.sh: what a Lambda
# `bootstrap` needs from the provided.al2023 runtime (needs readelf, binutils).
#
#   bootstrap_glibc FILE        prints the highest GLIBC_x.y symbol version FILE
#                               needs (empty when it needs none)
#   glibc_at_most NEED MAX      succeeds when version NEED <= MAX
#   bootstrap_machine FILE      prints the ELF machine (AArch64, Advanced Micro Devices X86-64, ...)
#
# provided.al2023 ships glibc 2.34: a binary linked against a newer glibc
# starts nowhere but on the build machine.
provided_al2023_glibc=2.34

bootstrap_glibc() {
  readelf -V -W "$1" | { grep -oE 'GLIBC_[0-9]+(\.[0-9]+)+' || true; } | sed 's/GLIBC_//' | sort -uV | tail -n 1
}

glibc_at_most() {
  [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -n 1)" = "$2" ]
}

bootstrap_machine() {
  readelf -h -W "$1" | sed -n 's/^ *Machine: *//p'
}
