#!/usr/bin/python3
"""A first session with dedupd from Python: the idempotent-consumer steps by hand.

Generates the dedup.v1 stubs from proto/ at start (protoc and
grpc_python_plugin from Debian's protobuf-compiler-grpc), then plays one
message delivered twice:

    /usr/bin/python3 client/examples/session.py --target 127.0.0.1:7400

Against a server with TLS, mutual TLS or bearer tokens (README "Security"):

    session.py --target dedupd.example:7400 --tls_ca ca.pem \
        --tls_cert client.pem --tls_key client.key
    session.py --target dedupd.example:7400 --tls_ca ca.pem --bearer_token_file token

Needs Debian's python3-grpcio and python3-protobuf (deploy/install-deps.sh
installs them).
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_stubs():
    out = tempfile.mkdtemp(prefix="dedup-stubs-")
    subprocess.run(
        ["protoc", "--proto_path", os.path.join(ROOT, "proto"),
         "--python_out", out, "--grpc_out", out,
         "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin",
         "dedup/v1/dedup.proto"],
        check=True)
    sys.path.insert(0, out)
    from dedup.v1 import dedup_pb2, dedup_pb2_grpc  # noqa: E402
    return dedup_pb2, dedup_pb2_grpc


def read(path):
    with open(path, "rb") as f:
        return f.read()


def open_channel(grpc, args):
    """Plaintext, or TLS with an optional client certificate and bearer token."""
    if not args.tls_ca:
        return grpc.insecure_channel(args.target)
    credentials = grpc.ssl_channel_credentials(
        root_certificates=read(args.tls_ca),
        private_key=read(args.tls_key) if args.tls_key else None,
        certificate_chain=read(args.tls_cert) if args.tls_cert else None)
    if args.bearer_token_file:
        token = read(args.bearer_token_file).decode().splitlines()[0].strip()
        credentials = grpc.composite_channel_credentials(
            credentials, grpc.access_token_call_credentials(token))
    return grpc.secure_channel(args.target, credentials)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="127.0.0.1:7400", help="dedupd address")
    parser.add_argument("--namespace", default="coupon-deduct")
    parser.add_argument("--tls_ca", help="connect over TLS, verifying dedupd against this CA bundle")
    parser.add_argument("--tls_cert", help="with --tls_key: this client's certificate (mutual TLS)")
    parser.add_argument("--tls_key", help="its private key")
    parser.add_argument("--bearer_token_file",
                        help="over TLS, authenticate with the token on this file's first line")
    args = parser.parse_args()
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls_cert and --tls_key go together")
    if (args.tls_cert or args.bearer_token_file) and not args.tls_ca:
        parser.error("--tls_cert and --bearer_token_file need TLS (--tls_ca)")

    pb, rpc = load_stubs()
    import grpc
    stub = rpc.DedupStub(open_channel(grpc, args))
    key = f"order-{int(time.time() * 1000)}".encode()
    ns = args.namespace

    def show(label, response):
        text = " ".join(str(response).split())
        print(f"{label:<34} {text}")

    first = stub.Claim(pb.ClaimRequest(namespace=ns, key=key, owner="worker-a"))
    show("worker-a Claim", first)
    second = stub.Claim(pb.ClaimRequest(namespace=ns, key=key, owner="worker-b"))
    show("worker-b Claim (duplicate)", second)
    done = stub.Complete(pb.CompleteRequest(namespace=ns, key=key, token=first.token,
                                            result=b"coupon 42 deducted"))
    show("worker-a Complete", done)
    late = stub.Claim(pb.ClaimRequest(namespace=ns, key=key, owner="worker-c"))
    show("worker-c Claim (late duplicate)", late)
    show("Query", stub.Query(pb.QueryRequest(namespace=ns, key=key)))
    try:
        stub.Claim(pb.ClaimRequest(namespace=ns, key=b"", owner="worker-d"))
    except grpc.RpcError as error:
        print(f"{'Claim with an empty key':<34} {error.code().name}: {error.details()}")


if __name__ == "__main__":
    main()
