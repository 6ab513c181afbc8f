#!/usr/bin/env bash
# The certificates of `bench cold-tls`'s TLS endpoint, made fresh in DIR:
# a test root CA, an intermediate it signs and a server certificate for
# 127.0.0.1 and localhost the intermediate signs (RSA 2048 throughout, a
# chain of the shape AWS endpoints present: leaf and intermediate sent, the
# root in the client's store).
#
#   scripts/bench/tls-certs.sh DIR
#
# DIR/server-chain.pem, DIR/server.key: what the proxy presents.
# DIR/trusted.pem: the machine's roots (as a client on Lambda loads them)
#   and the test root: what both tools are given.
# DIR/untrusted.pem: the machine's roots and another root, not the test
#   root: the handshake must fail with it.
set -euo pipefail
dir=${1:?usage: scripts/bench/tls-certs.sh DIR}
mkdir -p "$dir"
command -v openssl >/dev/null || { echo "tls-certs: installing openssl (apt)" >&2; apt-get install -y -qq openssl >&2; }
cd "$dir"
root_ext="basicConstraints=critical,CA:TRUE
keyUsage=critical,keyCertSign,cRLSign"
leaf_ext="basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
key() { openssl genpkey -quiet -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1"; }
# A self-signed root: ca NAME SUBJECT
root() {
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -sha256 -days 2 -subj "/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -out "$1.pem" 2>/dev/null
}
# A certificate NAME for SUBJECT signed by ISSUER, with the extensions EXT.
signed() {
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr" 2>/dev/null
  openssl x509 -req -in "$1.csr" -CA "$3.pem" -CAkey "$3.key" -CAcreateserial -sha256 -days 2 \
    -extfile <(printf '%s\n' "$4") -out "$1.pem" 2>/dev/null
}
root ca "lambda-idempotency bench test root"
signed intermediate "lambda-idempotency bench test intermediate" ca "$root_ext"
signed server localhost intermediate "$leaf_ext"
root other-ca "not the bench's test root"
cat server.pem intermediate.pem >server-chain.pem
system=/etc/ssl/certs/ca-certificates.crt
[ -r "$system" ] || system=/dev/null
cat "$system" ca.pem >trusted.pem
cat "$system" other-ca.pem >untrusted.pem
openssl verify -CAfile ca.pem -untrusted intermediate.pem server.pem >/dev/null
