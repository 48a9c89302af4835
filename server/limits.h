#ifndef DEDUP_SERVER_LIMITS_H_
#define DEDUP_SERVER_LIMITS_H_

#include <cstdint>

namespace dedup::server {

// Bounds on what one client can make the server hold (design.md §10). Each
// is a field of dedup.v1.ServerConfig with the default shown; past a bound
// the server answers RESOURCE_EXHAUSTED or stops reading, never buffers.
struct ServerLimits {
  // Storage tasks waiting for a worker; a full queue answers
  // RESOURCE_EXHAUSTED.
  uint32_t max_queued_tasks = 1024;
  // Largest request gRPC accepts, and largest answer it sends.
  uint32_t max_receive_message_bytes = 4 << 20;
  uint32_t max_send_message_bytes = 4 << 20;
  // HTTP/2 streams (calls) at once on one connection.
  uint32_t max_concurrent_streams = 100;
  // Pings an idle connection after keepalive_time and drops it when no ack
  // comes within keepalive_timeout; a client pinging more often than
  // min_client_ping_interval is disconnected.
  int64_t keepalive_time_ms = 60'000;
  int64_t keepalive_timeout_ms = 20'000;
  int64_t min_client_ping_interval_ms = 10'000;
  // Bytes of records (key, owner, fingerprint, result) one Batch or Stream
  // answer may carry; reads past it answer RESOURCE_EXHAUSTED each. Under
  // the 4 MiB that gRPC clients accept by default.
  uint32_t max_batch_answer_bytes = 3 << 20;
  // Batches of one Stream read and not yet answered (running, or waiting
  // to be written); reading stops at this many.
  uint32_t max_stream_batches = 16;
  // Bytes one Stream may hold before it stops reading: requests read and
  // not yet answered, answers waiting for a client that reads slowly, and
  // gRPC's encoded copy of the answer being written. The batch read last
  // can take it over by its request and answer.
  uint32_t max_stream_answer_bytes = 8 << 20;
  // Records one Scan page examines (matching or not) before it yields.
  uint32_t scan_max_examined = 4096;
  // Threads of Scan's own pool, apart from the workers of claims, so that
  // admin scans cannot starve them. Its queue holds max_queued_tasks too.
  uint32_t scan_workers = 2;
  // Stream calls open at once on the whole server; one more answers
  // RESOURCE_EXHAUSTED. Times max_stream_answer_bytes, it bounds the
  // answers slow readers can make the server hold.
  uint32_t max_open_streams = 128;
  // A connection older than this is asked to close, and its calls get the
  // grace to finish: every client reconnects, and so presents its
  // certificate again, at least this often. 0: no limit.
  int64_t max_connection_age_ms = 3600'000;
  int64_t max_connection_age_grace_ms = 30'000;
  // TCP connections to the gRPC port open at once, and open at once from
  // one peer address (an IPv6 /64); one more is closed as soon as it is
  // accepted (connection_gate.h). The server-wide bound is further held to
  // half the open-file limit, so connections cannot take the descriptors
  // storage needs.
  uint32_t max_connections = 4096;
  uint32_t max_connections_per_address = 512;
  // A connection that has not completed its TLS handshake and sent the
  // HTTP/2 connection preface within this is closed (gRPC's own default is
  // 120 s), so that silent or half-speaking clients cannot hold the slots
  // above. Far above a real TLS handshake over a WAN.
  int64_t handshake_timeout_ms = 10'000;
  // What one authenticated identity may hold at once (tenant_quota.h;
  // without grants nothing is limited per caller): open Stream calls, and
  // storage tasks (unary calls, Batches, batches of a Stream) queued or
  // running. Past either, RESOURCE_EXHAUSTED naming the limit, while other
  // tenants are still served.
  uint32_t max_open_streams_per_identity = 32;
  uint32_t max_queued_tasks_per_identity = 256;
  // Operations (a unary call is one, a Batch or a Stream batch one per
  // item) one authenticated identity may start a second; 0: no rate. Ahead
  // of it, a call waits for its time (up to half a second), past that it
  // is refused RESOURCE_EXHAUSTED (tenant_quota.h).
  uint32_t max_operations_per_second_per_identity = 0;
};

}  // namespace dedup::server

#endif  // DEDUP_SERVER_LIMITS_H_
