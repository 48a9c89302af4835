#!/usr/bin/python3
"""dedupd spoken to by a client nobody here wrote: Python's grpcio.

Generates dedup.v1 stubs from proto/ with Debian's protoc and
grpc_python_plugin into a temp dir, starts the dedupd binary on
127.0.0.1 port 0, and checks Claim / Complete / Query and a bad input.

    python_client_test.py --dedupd build/server/dedupd --proto proto
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
        port_file = os.path.join(cls.tmp, "port")
        cls.log = open(os.path.join(cls.tmp, "dedupd.log"), "w")
        cls.server = subprocess.Popen(
            [ARGS.dedupd, "--listen=127.0.0.1:0", "--metrics_listen=off", "--port_file=" + port_file,
             "--data_dir=" + os.path.join(cls.tmp, "data"), "--durability=buffered"],
            stdout=cls.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 15
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if time.time() > deadline or cls.server.poll() is not None:
                raise RuntimeError("dedupd did not start; see " + cls.log.name)
            time.sleep(0.05)
        port = open(port_file).read().strip()
        cls.channel = grpc.insecure_channel("127.0.0.1:" + port)
        cls.stub = rpc.DedupStub(cls.channel)

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.send_signal(signal.SIGTERM)
        code = cls.server.wait(timeout=30)
        cls.log.close()
        shutil.rmtree(cls.tmp, ignore_errors=True)
        assert code == 0, "dedupd exited %d on SIGTERM" % code

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


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dedupd", required=True)
    parser.add_argument("--proto", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)
