#!/bin/sh
# Remakes the fuzz target tls_records' certificates (committed; test-only,
# never used by a server): a CA and a server certificate for
# 127.0.0.1/localhost that it signed, P-256 keys (fast handshakes),
# valid for 100 years. Run from this directory.
set -e
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout ca.key -out ca.pem -days 36500 -subj /CN=osmium-fuzz-ca
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout server.key -out server.csr -subj /CN=localhost
printf 'basicConstraints=CA:FALSE\nsubjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > server.ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
    -out server.pem -days 36500 -extfile server.ext
rm -f server.csr server.ext ca.srl ca.key
