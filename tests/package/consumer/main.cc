// Links against the installed dedup::client and runs the guard once
// against the dedupd given on the command line.
#include <iostream>

#include "dedup/client/guard.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: consumer HOST:PORT\n";
    return 2;
  }
  dedup::client::ClientOptions options;
  options.endpoint = argv[1];
  auto client = dedup::client::Client::Create(options);
  if (!client.ok()) return 1;
  dedup::client::Guard guard(client->get(), {"package-check", "consumer"});
  auto done =
      guard.Run("key-1", [](const dedup::client::GuardContext&) -> absl::StatusOr<std::string> {
        return std::string("ok");
      });
  if (!done.ok()) {
    std::cerr << done.status() << "\n";
    return 1;
  }
  std::cout << dedup::client::GuardOutcomeName(done->outcome) << "\n";
  return done->outcome == dedup::client::GuardOutcome::kExecuted ? 0 : 1;
}
