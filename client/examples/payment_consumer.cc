// A payment-callback consumer fleet against a running dedupd: 8 threads take
// deliveries from a simulated at-least-once broker and charge a provider
// stub that refuses stale fencing tokens. Run it with and without dedup:
//
//   payment_consumer --endpoint=127.0.0.1:7400              # the guard
//   payment_consumer --endpoint=127.0.0.1:7400 --no_dedup   # charge every delivery
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "payment_pipeline.h"

ABSL_FLAG(std::string, endpoint, "127.0.0.1:7400", "dedupd address.");
ABSL_FLAG(std::string, ns, "payment-callback", "Namespace of the payment keys.");
ABSL_FLAG(int, payments, 2000, "Distinct payments.");
ABSL_FLAG(int, threads, 8, "Consumer threads.");
ABSL_FLAG(int, redeliver_every, 20,
          "One payment in N is redelivered while its first copy is processed (0: none).");
ABSL_FLAG(int, fail_first_every, 0,
          "The provider fails the first charge of one payment in N, which the broker "
          "redelivers once (0: none).");
ABSL_FLAG(int, charge_ms, 1, "How long a charge takes.");
ABSL_FLAG(bool, no_dedup, false, "Charge every delivery, without dedupd.");
ABSL_FLAG(std::string, run_id, "", "Key prefix (default: the current time), so runs differ.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "simulates a payment consumer fleet on an at-least-once broker, with or without dedupd");
  absl::ParseCommandLine(argc, argv);
  dedup::examples::PipelineOptions options;
  options.payments = absl::GetFlag(FLAGS_payments);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.redeliver_every = absl::GetFlag(FLAGS_redeliver_every);
  options.fail_first_every = absl::GetFlag(FLAGS_fail_first_every);
  options.charge_time = absl::Milliseconds(absl::GetFlag(FLAGS_charge_ms));
  options.use_guard = !absl::GetFlag(FLAGS_no_dedup);
  options.ns = absl::GetFlag(FLAGS_ns);
  options.run_id = absl::GetFlag(FLAGS_run_id).empty()
                       ? absl::StrCat(absl::ToUnixMillis(absl::Now()))
                       : absl::GetFlag(FLAGS_run_id);

  std::unique_ptr<dedup::client::Client> client;
  if (options.use_guard) {
    dedup::client::ClientOptions client_options;
    client_options.endpoint = absl::GetFlag(FLAGS_endpoint);
    auto created = dedup::client::Client::Create(client_options);
    if (!created.ok()) {
      std::cerr << "payment_consumer: " << created.status() << "\n";
      return 1;
    }
    client = std::move(*created);
  }
  const absl::Time start = absl::Now();
  dedup::examples::PipelineReport r = dedup::examples::RunPaymentPipeline(client.get(), options);
  std::cout << "mode=" << (options.use_guard ? "guard" : "no-dedup") << " payments=" << r.payments
            << " deliveries=" << r.deliveries << " charges=" << r.charges
            << " double_charged_keys=" << r.double_charged_keys << " executed=" << r.executed
            << " duplicates=" << r.duplicates << " in_progress=" << r.in_progress
            << " work_failures=" << r.work_failures << " errors=" << r.errors
            << " seconds=" << absl::ToDoubleSeconds(absl::Now() - start) << "\n";
  return r.errors == 0 ? 0 : 1;
}
