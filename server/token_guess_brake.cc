#include "server/token_guess_brake.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <iterator>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace dedup::server {
namespace {

// `text` with each "%XX" (two hex digits) replaced by its byte: gRPC
// writes a peer as a URI, escaping the brackets of an IPv6 address
// ("%5B", "%5D") and the '%' of its zone ("%25").
std::string PercentDecoded(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '%' && i + 2 < text.size() &&
        absl::ascii_isxdigit(static_cast<unsigned char>(text[i + 1])) &&
        absl::ascii_isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      auto digit = [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c))
                   ? c - '0'
                   : absl::ascii_tolower(static_cast<unsigned char>(c)) - 'a' + 10;
      };
      out.push_back(static_cast<char>(digit(text[i + 1]) * 16 + digit(text[i + 2])));
      i += 2;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

// The address of a decoded peer, without scheme, port, brackets or zone.
absl::string_view PeerAddress(absl::string_view peer) {
  if (!absl::ConsumePrefix(&peer, "ipv4:")) absl::ConsumePrefix(&peer, "ipv6:");
  if (absl::ConsumePrefix(&peer, "[")) {
    peer = peer.substr(0, peer.find(']'));
  } else if (std::count(peer.begin(), peer.end(), ':') == 1) {
    peer = peer.substr(0, peer.find(':'));  // IPv4 with a port.
  }
  return peer.substr(0, peer.find('%'));  // An IPv6 zone ("fe80::1%eth0").
}

}  // namespace

PeerKeys PeerAddressKeys(absl::string_view peer) {
  const std::string decoded = PercentDecoded(peer);
  const std::string address(PeerAddress(decoded));
  char text[INET6_ADDRSTRLEN];
  in_addr v4{};
  if (inet_pton(AF_INET, address.c_str(), &v4) == 1) {
    return {inet_ntop(AF_INET, &v4, text, sizeof(text)), ""};
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, address.c_str(), &v6) == 1) {
    // NAT64's well-known prefix: an IPv4 client behind a translator.
    static constexpr unsigned char kNat64[12] = {0x00, 0x64, 0xff, 0x9b};
    if (IN6_IS_ADDR_V4MAPPED(&v6) || std::equal(kNat64, kNat64 + 12, v6.s6_addr)) {
      std::copy_n(&v6.s6_addr[12], 4, reinterpret_cast<unsigned char*>(&v4));
      return {inet_ntop(AF_INET, &v4, text, sizeof(text)), ""};
    }
    PeerKeys keys;
    keys.host = inet_ntop(AF_INET6, &v6, text, sizeof(text));
    std::fill(&v6.s6_addr[8], &v6.s6_addr[16], 0);
    keys.prefix = absl::StrCat(inet_ntop(AF_INET6, &v6, text, sizeof(text)), "/64");
    return keys;
  }
  return {std::string(peer), ""};
}

bool TokenGuessBrake::Braked(absl::string_view peer, absl::Time now) const {
  const PeerKeys keys = PeerAddressKeys(peer);
  return Braked(keys.host, options_.max_unknown, now) ||
         (!keys.prefix.empty() && Braked(keys.prefix, options_.max_unknown_per_prefix, now));
}

void TokenGuessBrake::RecordUnknown(absl::string_view peer, absl::Time now) {
  const PeerKeys keys = PeerAddressKeys(peer);
  Record(keys.host, options_.max_unknown, now);
  if (!keys.prefix.empty()) Record(keys.prefix, options_.max_unknown_per_prefix, now);
}

bool TokenGuessBrake::Braked(const std::string& key, uint32_t limit, absl::Time now) const {
  auto it = addresses_.find(key);
  return it != addresses_.end() && it->second.count >= limit &&
         now - it->second.last < options_.penalty;
}

void TokenGuessBrake::Record(const std::string& key, uint32_t limit, absl::Time now) {
  auto it = addresses_.find(key);
  if (it == addresses_.end()) {
    if (addresses_.size() >= options_.max_addresses) Forget(now);
    if (addresses_.size() >= options_.max_addresses) return;
    it = addresses_.emplace(key, Guesses{now, now, 0}).first;
  }
  Guesses& guesses = it->second;
  // A count lapses once `penalty` has passed since it began without the
  // brake, or since its last guess under the brake.
  const bool braked = guesses.count >= limit;
  if ((braked && now - guesses.last >= options_.penalty) ||
      (!braked && now - guesses.first >= options_.penalty)) {
    guesses = Guesses{now, now, 0};
  }
  ++guesses.count;
  guesses.last = now;
}

void TokenGuessBrake::Forget(absl::Time now) {
  for (auto it = addresses_.begin(); it != addresses_.end();) {
    auto next = std::next(it);
    if (now - it->second.last >= options_.penalty) addresses_.erase(it);
    it = next;
  }
}

}  // namespace dedup::server
