#!/usr/bin/python3
"""dedupd spoken to by a client nobody here wrote: Python's grpcio.

Generates dedup.v1 stubs from proto/ with Debian's protoc and
grpc_python_plugin into a temp dir, starts the dedupd binary on
127.0.0.1 port 0, and checks Claim / Complete / Query and a bad input.
Then, against a dedupd with mutual TLS, bearer tokens and grants
(certificates made by openssl here), runs the example
client/examples/session.py and dedupctl and checks what each kind of caller
gets.

    python_client_test.py --dedupd build/server/dedupd --dedupctl build/client/dedupctl \
        --proto proto
"""
import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

ARGS = None


def start_dedupd(tmp, *flags):
    """Starts the dedupd binary on 127.0.0.1 port 0 with its data and log in
    TMP; returns (process, log file, "127.0.0.1:PORT")."""
    port_file = os.path.join(tmp, "port")
    log = open(os.path.join(tmp, "dedupd.log"), "w")
    server = subprocess.Popen(
        [ARGS.dedupd, "--listen=127.0.0.1:0", "--metrics_listen=off", "--port_file=" + port_file,
         "--data_dir=" + os.path.join(tmp, "data"), "--durability=buffered", *flags],
        stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 15
    while not (os.path.exists(port_file) and read_text(port_file)):
        if time.time() > deadline or server.poll() is not None:
            raise RuntimeError("dedupd did not start; see " + log.name)
        time.sleep(0.05)
    return server, log, "127.0.0.1:" + read_text(port_file)


def stop_dedupd(server, log):
    server.send_signal(signal.SIGTERM)
    code = server.wait(timeout=30)
    log.close()
    assert code == 0, "dedupd exited %d on SIGTERM" % code


def read_text(path):
    with open(path) as f:
        return f.read().strip()


def generate_stubs(proto_root, out):
    subprocess.run(
        ["protoc", "--proto_path", proto_root, "--python_out", out, "--grpc_out", out,
         "--plugin=protoc-gen-grpc=/usr/bin/grpc_python_plugin", "dedup/v1/dedup.proto"],
        check=True)
    sys.path.insert(0, out)


class PythonClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="dedup-interop-")
        generate_stubs(ARGS.proto, cls.tmp)
        global pb, rpc, grpc
        import grpc
        from dedup.v1 import dedup_pb2 as pb, dedup_pb2_grpc as rpc
        cls.server, cls.log, target = start_dedupd(cls.tmp)
        cls.channel = grpc.insecure_channel(target)
        cls.stub = rpc.DedupStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        try:
            stop_dedupd(cls.server, cls.log)
        finally:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_claim_complete_then_duplicate_gets_stored_result(self):
        first = self.stub.Claim(pb.ClaimRequest(namespace="py-orders", key=b"o-1", owner="py-a"))
        self.assertEqual(first.outcome, pb.ClaimResponse.ACQUIRED)
        self.assertGreater(first.token, 0)
        other = self.stub.Claim(pb.ClaimRequest(namespace="py-orders", key=b"o-1", owner="py-b"))
        self.assertEqual(other.outcome, pb.ClaimResponse.IN_PROGRESS)
        self.assertEqual(other.holder, "py-a")
        done = self.stub.Complete(pb.CompleteRequest(namespace="py-orders", key=b"o-1",
                                                     token=first.token, result=b"\x00ok\xff"))
        self.assertEqual(done.outcome, pb.CompleteResponse.OK)
        late = self.stub.Claim(pb.ClaimRequest(namespace="py-orders", key=b"o-1", owner="py-c"))
        self.assertEqual(late.outcome, pb.ClaimResponse.COMPLETED)
        self.assertEqual(late.result, b"\x00ok\xff")

    def test_query_reports_the_record_and_absent_keys(self):
        claim = self.stub.Claim(pb.ClaimRequest(namespace="py-orders", key=b"o-2", owner="py-a",
                                                fingerprint=b"sha"))
        record = self.stub.Query(pb.QueryRequest(namespace="py-orders", key=b"o-2")).record
        self.assertEqual(record.state, pb.STATE_IN_PROGRESS)
        self.assertGreater(claim.token, 0)
        self.assertEqual(record.token, 0, "a live claim's token is shown to its holder only")
        self.assertEqual(record.owner, "py-a")
        self.assertEqual(record.fingerprint, b"sha")
        absent = self.stub.Query(pb.QueryRequest(namespace="py-orders", key=b"never")).record
        self.assertEqual(absent.state, pb.STATE_ABSENT)

    def test_empty_key_is_invalid_argument_naming_the_field(self):
        with self.assertRaises(grpc.RpcError) as raised:
            self.stub.Claim(pb.ClaimRequest(namespace="py-orders", key=b"", owner="py-a"))
        self.assertEqual(raised.exception.code(), grpc.StatusCode.INVALID_ARGUMENT)
        self.assertIn("key", raised.exception.details())


def openssl(*args):
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_cert(directory, ca, name, san):
    """NAME.pem and NAME.key signed by CA (None: self-signed CA)."""
    pem, key = os.path.join(directory, name + ".pem"), os.path.join(directory, name + ".key")
    if ca is None:
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-days", "2", "-subj", "/CN=" + name, "-keyout", key, "-out", pem)
        return pem, key
    csr, ext = os.path.join(directory, name + ".csr"), os.path.join(directory, name + ".ext")
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-subj", "/CN=" + name, "-keyout", key, "-out", csr)
    with open(ext, "w") as f:
        f.write("subjectAltName=" + san + "\n")
    openssl("x509", "-req", "-in", csr, "-CA", os.path.join(directory, ca + ".pem"),
            "-CAkey", os.path.join(directory, ca + ".key"), "-CAcreateserial", "-days", "2",
            "-extfile", ext, "-out", pem)
    return pem, key


TOKEN = "py-token-6d2e9f41b7c3"


class PythonTlsAuthTest(unittest.TestCase):
    """Mutual TLS, bearer tokens and grants, from Python and the example."""

    @classmethod
    def setUpClass(cls):
        import hashlib
        cls.tmp = tempfile.mkdtemp(prefix="dedup-interop-tls-")
        generate_stubs(ARGS.proto, cls.tmp)
        global pb, rpc, grpc
        import grpc
        from dedup.v1 import dedup_pb2 as pb, dedup_pb2_grpc as rpc
        d = cls.tmp
        make_cert(d, None, "ca", None)
        make_cert(d, "ca", "server", "IP:127.0.0.1")
        make_cert(d, "ca", "worker", "URI:spiffe://py/worker")
        make_cert(d, "ca", "nobody", "URI:spiffe://py/nobody")
        digest = hashlib.sha256(TOKEN.encode()).hexdigest()
        with open(os.path.join(d, "tokens"), "w") as f:
            f.write("spiffe://py/token-worker sha256:%s\n" % digest)
        with open(os.path.join(d, "token"), "w") as f:
            f.write(TOKEN + "\n")
        with open(os.path.join(d, "unknown-token"), "w") as f:
            f.write("not-a-known-token\n")
        config = os.path.join(d, "dedupd.textproto")
        with open(config, "w") as f:
            f.write("""
                tls {{ cert: "{d}/server.pem" key: "{d}/server.key" ca: "{d}/ca.pem" }}
                auth {{
                  tokens_file: "{d}/tokens"
                  grants {{ identity: "spiffe://py/worker" namespaces: "coupon-deduct" roles: "claim" }}
                  grants {{ identity: "spiffe://py/token-worker" namespaces: "coupon-deduct" roles: "claim" }}
                }}
            """.format(d=d))
        cls.server, cls.log, cls.target = start_dedupd(d, "--config=" + config)

    @classmethod
    def tearDownClass(cls):
        try:
            stop_dedupd(cls.server, cls.log)
        finally:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def path(self, name):
        return os.path.join(self.tmp, name)

    def session(self, *flags):
        example = os.path.join(os.path.dirname(os.path.abspath(ARGS.proto)), "client", "examples",
                               "session.py")
        return subprocess.run(
            [sys.executable, example, "--target", self.target, "--tls_ca", self.path("ca.pem"),
             *flags], capture_output=True, text=True, timeout=60)

    def read(self, name):
        with open(self.path(name), "rb") as f:
            return f.read()

    def stub_for(self, cert):
        credentials = grpc.ssl_channel_credentials(
            root_certificates=self.read("ca.pem"), private_key=self.read(cert + ".key"),
            certificate_chain=self.read(cert + ".pem"))
        return rpc.DedupStub(grpc.secure_channel(self.target, credentials))

    def check_session(self, run):
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("outcome: COMPLETED", run.stdout)
        self.assertIn("INVALID_ARGUMENT", run.stdout)

    def test_the_example_session_over_mutual_tls(self):
        self.check_session(self.session("--tls_cert", self.path("worker.pem"),
                                        "--tls_key", self.path("worker.key")))

    def test_the_example_session_with_a_bearer_token(self):
        # The certificate's identity has no grant: the token's identity is
        # the one that counts.
        self.check_session(self.session("--tls_cert", self.path("nobody.pem"),
                                        "--tls_key", self.path("nobody.key"),
                                        "--bearer_token_file", self.path("token")))

    def test_an_unknown_token_is_unauthenticated(self):
        run = self.session("--tls_cert", self.path("worker.pem"), "--tls_key",
                           self.path("worker.key"), "--bearer_token_file",
                           self.path("unknown-token"))
        self.assertNotEqual(run.returncode, 0)
        self.assertIn("UNAUTHENTICATED", run.stderr)

    def test_an_identity_without_a_grant_is_denied_by_name(self):
        with self.assertRaises(grpc.RpcError) as raised:
            self.stub_for("nobody").Claim(
                pb.ClaimRequest(namespace="coupon-deduct", key=b"k", owner="x"), timeout=10)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.PERMISSION_DENIED)
        self.assertEqual(raised.exception.details(),
                         "identity 'spiffe://py/nobody' has no 'claim' grant on namespace "
                         "'coupon-deduct'")

    def test_dedupctl_with_a_bearer_token(self):
        base = [ARGS.dedupctl, "--endpoint=" + self.target, "--tls_ca=" + self.path("ca.pem"),
                "--tls_cert=" + self.path("nobody.pem"), "--tls_key=" + self.path("nobody.key")]
        run = subprocess.run(base + ["--bearer_token_file=" + self.path("token"), "claim",
                                     "coupon-deduct", "ctl-1", "--owner=ctl"],
                             capture_output=True, text=True, timeout=30)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("ACQUIRED", run.stdout)
        denied = subprocess.run(base + ["claim", "coupon-deduct", "ctl-2", "--owner=ctl"],
                                capture_output=True, text=True, timeout=30)
        self.assertEqual(denied.returncode, 1, denied.stdout)
        self.assertIn("identity 'spiffe://py/nobody' has no 'claim' grant", denied.stderr)
        plaintext = subprocess.run(
            [ARGS.dedupctl, "--endpoint=" + self.target,
             "--bearer_token_file=" + self.path("token"), "health"],
            capture_output=True, text=True, timeout=30)
        self.assertEqual(plaintext.returncode, 2)
        self.assertIn("--bearer_token_file needs TLS", plaintext.stderr)

    def test_plaintext_is_refused(self):
        stub = rpc.DedupStub(grpc.insecure_channel(self.target))
        with self.assertRaises(grpc.RpcError) as raised:
            stub.Query(pb.QueryRequest(namespace="coupon-deduct", key=b"k"), timeout=5)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dedupd", required=True)
    parser.add_argument("--proto", required=True)
    parser.add_argument("--dedupctl", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
