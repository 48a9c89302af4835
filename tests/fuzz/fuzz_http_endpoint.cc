// Fuzzes the HTTP endpoint behind /metrics, /healthz and /readyz
// (server/http_endpoint.h): the one part of dedupd that parses bytes from
// anyone who can reach its port.
//
// An input is two control bytes, then the bytes a client sends. The first
// control byte picks the head limit (the default 8 KiB, or 96 bytes, which
// short inputs reach); the second how the bytes are cut into chunks. Each
// input is played twice:
// - in process: the chunks go to an HttpRequestReader, each cut again to
//   what the reader wants, as the endpoint reads them; a complete head goes
//   to AnswerHttpRequest and RenderHttpResponse;
// - over a socket: to a real HttpEndpoint on 127.0.0.1 port 0, each chunk
//   a send of its own, then a half-close; the client reads until the
//   endpoint closes.
// An oracle written out here from the header's contract decides what should
// happen. Invariants:
// - the reader never holds more bytes than the limit; it completes exactly
//   when a blank line ("\r\n\r\n" or "\n\n", the first of them) ends the
//   head within the limit, with the head before that blank line, and
//   refuses exactly when no such blank line is within the limit and the
//   client sent as much; how the bytes were cut does not matter;
// - the answer is the oracle's: 400 unless the request line is
//   "METHOD TARGET HTTP/1.x", else 404 for a path without a route, else 405
//   for a method other than GET and HEAD, else the handler's answer;
// - what is sent is a well-formed HTTP/1.1 answer: a status line with the
//   code's reason phrase, one Content-Type and one Content-Length, the
//   latter the size of the body (of the handler's body for HEAD, which
//   sends none), and Connection: close;
// - the endpoint sends exactly those bytes, or nothing when the request is
//   refused or incomplete, and closes the connection within 20 seconds.
// ASan and UBSan watch memory; a libFuzzer timeout would catch a hang.

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/http_endpoint.h"
#include "tests/common/http_scrape.h"

namespace {

using dedup::server::HttpEndpoint;
using dedup::server::HttpHandler;
using dedup::server::HttpRequestReader;
using dedup::server::HttpResponse;

void Check(bool condition, const char* what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz_http_endpoint: invariant broken: %s\n", what);
    std::abort();
  }
}

constexpr size_t kTightLimit = 96;
constexpr size_t kRoomyLimit = HttpEndpoint::Options().max_request_bytes;
constexpr auto kCloseWithin = std::chrono::seconds(20);

// What the handlers answer, each with something to tell it apart.
const HttpResponse& MetricsAnswer() {
  static const HttpResponse* answer = [] {
    std::string body;
    for (int i = 0; i < 600; ++i) {
      body += "dedup_fuzz_series{shard=\"" + std::to_string(i) + "\"} 1\n";
    }
    return new HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", body};
  }();
  return *answer;
}
const HttpResponse kHealthy{200, "text/plain; charset=utf-8", "ok\n"};
const HttpResponse kNotReady{503, "text/plain; charset=utf-8", "not ready: storage\n"};
const HttpResponse kEmpty{200, "application/octet-stream", ""};

const std::map<std::string, HttpHandler>& Routes() {
  static const auto* routes = new std::map<std::string, HttpHandler>{
      {"/metrics", [] { return MetricsAnswer(); }},
      {"/healthz", [] { return kHealthy; }},
      {"/readyz", [] { return kNotReady; }},
      {"/", [] { return kEmpty; }},
  };
  return *routes;
}

// The endpoints under test, started once: one per head limit.
HttpEndpoint& Endpoint(bool tight) {
  static HttpEndpoint* endpoints[2] = {nullptr, nullptr};
  HttpEndpoint*& endpoint = endpoints[tight ? 1 : 0];
  if (endpoint == nullptr) {
    HttpEndpoint::Options options;
    options.request_deadline = absl::Seconds(60);  // Longer than kCloseWithin.
    options.max_request_bytes = tight ? kTightLimit : kRoomyLimit;
    auto started = HttpEndpoint::Start("127.0.0.1:0", Routes(), options);
    Check(started.ok(), "an endpoint starts on 127.0.0.1:0");
    endpoint = started->release();
  }
  return *endpoint;
}

// The oracle.

enum class Outcome { kIncomplete, kRefused, kComplete };

struct ExpectedRead {
  Outcome outcome;
  std::string head;
};

ExpectedRead ExpectRead(absl::string_view sent, size_t limit) {
  // The first blank line: "\n\n", or "\r\n\r\n" (found at its first "\n").
  for (size_t i = 0; i + 1 < sent.size() && i + 1 < limit; ++i) {
    if (sent[i] != '\n') continue;
    size_t start = 0;
    size_t end = 0;
    if (sent[i + 1] == '\n') {
      start = i;
      end = i + 2;
    } else if (i > 0 && sent[i - 1] == '\r' && sent[i + 1] == '\r' && i + 2 < sent.size() &&
               sent[i + 2] == '\n') {
      start = i - 1;
      end = i + 3;
    } else {
      continue;
    }
    if (end > limit) break;  // Any later one ends later still.
    return {Outcome::kComplete, std::string(sent.substr(0, start))};
  }
  return {sent.size() >= limit ? Outcome::kRefused : Outcome::kIncomplete, ""};
}

struct ExpectedAnswer {
  int code;
  bool head_only;
  HttpResponse response;
};

ExpectedAnswer ExpectAnswer(absl::string_view head) {
  const HttpResponse bad{400, "text/plain; charset=utf-8", "bad request\n"};
  const HttpResponse missing{404, "text/plain; charset=utf-8", "not found\n"};
  const HttpResponse wrong_method{405, "text/plain; charset=utf-8", "GET only\n"};
  size_t line_end = 0;
  while (line_end < head.size() && head[line_end] != '\r' && head[line_end] != '\n') ++line_end;
  const absl::string_view line = head.substr(0, line_end);
  const size_t first = line.find(' ');
  const size_t second = first == absl::string_view::npos ? first : line.find(' ', first + 1);
  if (second == absl::string_view::npos || line.find(' ', second + 1) != absl::string_view::npos) {
    return {400, false, bad};
  }
  const absl::string_view method = line.substr(0, first);
  const absl::string_view target = line.substr(first + 1, second - first - 1);
  const absl::string_view version = line.substr(second + 1);
  if (version.substr(0, 7) != "HTTP/1.") return {400, false, bad};
  const absl::string_view path = target.substr(0, target.find('?'));
  HttpResponse routed;
  if (path == "/metrics") {
    routed = MetricsAnswer();
  } else if (path == "/healthz") {
    routed = kHealthy;
  } else if (path == "/readyz") {
    routed = kNotReady;
  } else if (path == "/") {
    routed = kEmpty;
  } else {
    return {404, false, missing};
  }
  if (method != "GET" && method != "HEAD") return {405, false, wrong_method};
  return {routed.code, method == "HEAD", routed};
}

const char* Reason(int code) {
  switch (code) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 503:
      return "Service Unavailable";
  }
  return nullptr;
}

// `sent` is a well-formed HTTP/1.1 answer, and the one `expected` describes.
void CheckAnswerBytes(const std::string& sent, const ExpectedAnswer& expected) {
  const size_t head_end = sent.find("\r\n\r\n");
  Check(head_end != std::string::npos, "the answer's head ends with a blank line");
  const absl::string_view head = absl::string_view(sent).substr(0, head_end + 2);
  const absl::string_view body = absl::string_view(sent).substr(head_end + 4);
  const size_t status_end = head.find("\r\n");
  const std::string status = "HTTP/1.1 " + std::to_string(expected.code) + " ";
  Check(Reason(expected.code) != nullptr, "the oracle knows the code");
  Check(head.substr(0, status_end) == status + Reason(expected.code),
        "the status line is HTTP/1.1, the expected code and its reason");
  int content_types = 0;
  int content_lengths = 0;
  bool closes = false;
  size_t at = status_end + 2;
  while (at < head.size()) {
    const size_t end = head.find("\r\n", at);
    const absl::string_view field = head.substr(at, end - at);
    at = end + 2;
    const size_t colon = field.find(": ");
    Check(colon != absl::string_view::npos && colon > 0, "every header line is \"Name: value\"");
    Check(field.find_first_of("\r\n") == absl::string_view::npos, "no stray CR or LF in a header");
    const absl::string_view name = field.substr(0, colon);
    const absl::string_view value = field.substr(colon + 2);
    if (name == "Content-Type") {
      ++content_types;
      Check(value == expected.response.content_type, "Content-Type is the handler's");
    } else if (name == "Content-Length") {
      ++content_lengths;
      Check(value == std::to_string(expected.response.body.size()),
            "Content-Length is the size of the body (the handler's, for HEAD)");
    } else if (name == "Connection") {
      closes = value == "close";
    }
  }
  Check(content_types == 1 && content_lengths == 1, "one Content-Type, one Content-Length");
  Check(closes, "Connection: close");
  if (expected.head_only) {
    Check(body.empty(), "HEAD is answered without a body");
  } else {
    Check(body == expected.response.body, "the body is the expected one, whole");
  }
}

// The input's bytes, cut as `seed` says: whole for 0, otherwise into
// pieces of assorted sizes.
std::vector<absl::string_view> Cut(absl::string_view bytes, uint8_t seed) {
  static constexpr size_t kSizes[] = {1, 2, 3, 7, 64, 95, 97, 4096};
  if (seed == 0) return {bytes};
  std::vector<absl::string_view> chunks;
  uint32_t state = seed;
  while (!bytes.empty()) {
    state = state * 1103515245u + 12345u;
    const size_t n = std::min(bytes.size(), kSizes[(state >> 16) % 8]);
    chunks.push_back(bytes.substr(0, n));
    bytes.remove_prefix(n);
  }
  return chunks;
}

// Plays the chunks to a reader as the endpoint does, and what it answers
// when the head is complete (nothing otherwise).
Outcome ReadInProcess(const std::vector<absl::string_view>& chunks, size_t limit, std::string* head,
                      std::string* answer) {
  HttpRequestReader reader(limit);
  HttpRequestReader::State state = HttpRequestReader::State::kReading;
  for (absl::string_view chunk : chunks) {
    while (!chunk.empty() && state == HttpRequestReader::State::kReading) {
      const size_t wanted = reader.Wanted();
      Check(wanted > 0, "a reader that reads wants bytes");
      const size_t n = std::min(wanted, chunk.size());
      state = reader.Add(chunk.substr(0, n));
      chunk.remove_prefix(n);
      Check(reader.received() <= limit, "the reader never takes more than the head limit");
    }
  }
  switch (state) {
    case HttpRequestReader::State::kReading:
      return Outcome::kIncomplete;
    case HttpRequestReader::State::kTooLarge:
      return Outcome::kRefused;
    case HttpRequestReader::State::kComplete:
      break;
  }
  *head = std::string(reader.head());
  bool head_only = false;
  const HttpResponse response = AnswerHttpRequest(reader.head(), Routes(), &head_only);
  *answer = RenderHttpResponse(response, head_only);
  return Outcome::kComplete;
}

// Sends the chunks to the endpoint on `port`, each a send of its own, then
// half-closes and reads until the endpoint closes. False when it does not
// close within kCloseWithin.
bool ExchangeOverSocket(int port, const std::vector<absl::string_view>& chunks,
                        std::string* received) {
  int fd = dedup::test::ConnectLoopback(port);
  for (int attempt = 0; fd < 0 && attempt < 50; ++attempt) {  // Ports run short.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    fd = dedup::test::ConnectLoopback(port);
  }
  Check(fd >= 0, "connects to the endpoint");
  bool open = true;
  for (absl::string_view chunk : chunks) {
    while (open && !chunk.empty()) {
      const ssize_t n = send(fd, chunk.data(), chunk.size(), MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      open = n > 0;  // Otherwise the endpoint closed: it read all it wanted.
      if (open) chunk.remove_prefix(static_cast<size_t>(n));
    }
  }
  shutdown(fd, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + kCloseWithin;
  bool closed = false;
  while (!closed) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd readable{fd, POLLIN, 0};
    if (left.count() <= 0 || poll(&readable, 1, static_cast<int>(left.count())) == 0) break;
    char buffer[16384];
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n > 0) {
      received->append(buffer, static_cast<size_t>(n));
    } else if (n == 0 || errno != EINTR) {
      closed = true;  // EOF, or a reset: the endpoint closed with bytes unread.
    }
  }
  close(fd);
  return closed;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const bool tight = (data[0] & 1) != 0;
  const size_t limit = tight ? kTightLimit : kRoomyLimit;
  const absl::string_view sent(reinterpret_cast<const char*>(data) + 2, size - 2);
  const std::vector<absl::string_view> chunks = Cut(sent, data[1]);

  const ExpectedRead expected = ExpectRead(sent, limit);
  std::string head;
  std::string answer;
  const Outcome outcome = ReadInProcess(chunks, limit, &head, &answer);
  Check(outcome == expected.outcome, "the reader completes, refuses or waits as the oracle does");
  std::string whole_head;
  std::string whole_answer;
  Check(ReadInProcess({sent}, limit, &whole_head, &whole_answer) == outcome && whole_head == head &&
            whole_answer == answer,
        "how the bytes are cut does not change what the reader does");
  if (outcome == Outcome::kComplete) {
    Check(head == expected.head, "the head is what precedes the first blank line");
    CheckAnswerBytes(answer, ExpectAnswer(head));
  }

  std::string received;
  Check(ExchangeOverSocket(Endpoint(tight).port(), chunks, &received),
        "the endpoint closes the connection within 20 s of the half-close");
  Check(received == answer,
        "over a socket the endpoint sends what the reader and renderer make, or nothing");
  return 0;
}
