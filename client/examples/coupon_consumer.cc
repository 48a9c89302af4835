// The smallest useful consumer: deduct a coupon at most once per message,
// whatever the broker redelivers. Feed it message ids on stdin, one per
// line (repeat some to play the broker's redeliveries):
//
//   printf 'order-1\norder-2\norder-1\n' | coupon_consumer --endpoint=127.0.0.1:7400
#include <unistd.h>

#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "dedup/client/guard.h"

ABSL_FLAG(std::string, endpoint, "127.0.0.1:7400", "dedupd address.");
ABSL_FLAG(std::string, ns, "coupon-deduct", "Namespace of the coupon keys.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("deducts a coupon once per message id read from stdin");
  absl::ParseCommandLine(argc, argv);
  dedup::client::ClientOptions options;
  options.endpoint = absl::GetFlag(FLAGS_endpoint);
  auto client = dedup::client::Client::Create(options);
  if (!client.ok()) {
    std::cerr << "coupon_consumer: " << client.status() << "\n";
    return 1;
  }
  const std::string owner = absl::StrCat("coupon-consumer-", getpid());
  dedup::client::Guard guard(client->get(), {absl::GetFlag(FLAGS_ns), owner});

  int deducted = 0;
  std::string message_id;
  while (std::getline(std::cin, message_id)) {
    if (message_id.empty()) continue;
    auto done = guard.Run(
        message_id, [&](const dedup::client::GuardContext& ctx) -> absl::StatusOr<std::string> {
          ++deducted;  // The side effect: here, the coupon service call with key and token.
          return absl::StrCat("coupon deducted for ", ctx.key, " (token ", ctx.token, ")");
        });
    if (!done.ok()) {
      std::cout << message_id
                << ": dedupd unreachable, leave for redelivery: " << done.status().message()
                << "\n";
      continue;
    }
    std::cout << message_id << ": " << dedup::client::GuardOutcomeName(done->outcome)
              << (done->result.empty() ? "" : ": " + done->result) << "\n";
  }
  std::cout << "deducted " << deducted << " coupon(s)\n";
  return 0;
}
