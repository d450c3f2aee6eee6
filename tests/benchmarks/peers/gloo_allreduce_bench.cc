// Gloo all-reduce benchmark for scripts/compare_allreduce.sh: float32 sum over Gloo's TCP
// transport with the legacy algorithm classes allreduce_ring_chunked or
// allreduce_halving_doubling (what Debian 12's libgloo-dev 0.5.0 ships; its newer
// gloo::allreduce API offers only ring and bcube). One process per rank, started by the caller
// (in a network namespace each); they meet through a gloo FileStore in a shared directory.
//
//   gloo_allreduce_bench --rank R --size N --address 198.18.0.10 --store DIR
//                        [--algorithm ring_chunked|halving_doubling] [-b 8 -e 64M -n 20 -w 5]
//
// Output: see peer_bench_common.h. Gloo reports failures with exceptions; they are caught here
// and turned into a message and exit status 1.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/barrier_all_to_one.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/transport/tcp/device.h"
#include "tests/benchmarks/peers/peer_bench_common.h"

namespace baton::peerbench {
namespace {

struct GlooOptions {
  Options common;
  int rank = -1;
  int size = -1;
  std::string address = "127.0.0.1";
  std::string store;
  std::string prefix = "gloo-bench";
  std::string algorithm = "ring_chunked";
  int64_t timeout_s = 300;
};

void Usage() {
  std::fprintf(stderr,
               "Usage: gloo_allreduce_bench --rank R --size N --store DIR [options]\n"
               "Float32 sum all-reduce with Gloo over TCP; rank 0 prints one RESULT line per "
               "size.\n"
               "  --rank=R                this process's rank, 0..N-1\n"
               "  --size=N                number of ranks\n"
               "  --address=127.0.0.1     address the TCP device binds to (this host's)\n"
               "  --store=DIR             shared directory of the gloo FileStore (rendezvous)\n"
               "  --prefix=gloo-bench     key prefix in the store (one per run)\n"
               "  --algorithm=ring_chunked  ring_chunked or halving_doubling\n"
               "  --timeout-s=300         Gloo's per-operation timeout\n"
               "%s",
               CommonUsage());
}

// Parses argv into *options; returns an error message, empty on success.
std::string Parse(int argc, char** argv, GlooOptions* options) {
  for (int i = 1; i < argc; ++i) {
    std::string error;
    if (ParseCommonOption(argc, argv, &i, &options->common, &error)) {
      if (!error.empty()) return error;
      continue;
    }
    std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      Usage();
      std::exit(0);
    }
    std::string name = arg;
    std::string value;
    const size_t eq = arg.find('=');
    if (eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return arg + " needs a value";
    }
    if (name == "--rank") {
      options->rank = static_cast<int>(ParseBytes(value));
    } else if (name == "--size") {
      options->size = static_cast<int>(ParseBytes(value));
    } else if (name == "--address") {
      options->address = value;
    } else if (name == "--store") {
      options->store = value;
    } else if (name == "--prefix") {
      options->prefix = value;
    } else if (name == "--algorithm") {
      options->algorithm = value;
    } else if (name == "--timeout-s") {
      options->timeout_s = ParseBytes(value);
    } else {
      return "unknown option " + arg;
    }
  }
  if (options->size < 1 || options->rank < 0 || options->rank >= options->size) {
    return "need --size >= 1 and 0 <= --rank < --size";
  }
  if (options->store.empty()) return "need --store DIR";
  if (options->algorithm != "ring_chunked" && options->algorithm != "halving_doubling") {
    return "--algorithm must be ring_chunked or halving_doubling";
  }
  if (options->timeout_s < 1) return "--timeout-s must be at least 1";
  return ValidateOptions(options->common);
}

std::unique_ptr<gloo::Algorithm> MakeAllreduce(const std::string& algorithm,
                                               const std::shared_ptr<gloo::Context>& context,
                                               float* data, int count) {
  if (algorithm == "halving_doubling") {
    return std::make_unique<gloo::AllreduceHalvingDoubling<float>>(
        context, std::vector<float*>{data}, count);
  }
  return std::make_unique<gloo::AllreduceRingChunked<float>>(context, std::vector<float*>{data},
                                                             count);
}

// Element-wise max (or sum) over ranks of `values`, in place.
void AllreduceDoubles(const std::shared_ptr<gloo::Context>& context, std::vector<double>* values,
                      const gloo::ReductionFunction<double>* fn) {
  if (context->size == 1 || values->empty()) return;
  gloo::AllreduceRing<double> reduce(context, {values->data()}, static_cast<int>(values->size()),
                                     fn);
  reduce.run();
}

int Run(const GlooOptions& options) {
  const Options& common = options.common;
  gloo::transport::tcp::attr attr;
  attr.hostname = options.address;
  std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore file_store(options.store);
  gloo::rendezvous::PrefixStore store(options.prefix, file_store);
  auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
  context->setTimeout(std::chrono::seconds(options.timeout_s));
  context->connectFullMesh(store, device);

  if (options.rank == 0) PrintHeader("gloo", options.algorithm.c_str(), options.size, common);
  const size_t max_count = static_cast<size_t>(common.max_bytes / 4);
  std::vector<float> source(max_count);
  std::vector<float> data(max_count);
  FillInput(source.data(), max_count, options.rank);
  gloo::BarrierAllToOne barrier(context);

  for (int64_t bytes : Sizes(common)) {
    const size_t count = static_cast<size_t>(bytes / 4);
    std::unique_ptr<gloo::Algorithm> allreduce =
        MakeAllreduce(options.algorithm, context, data.data(), static_cast<int>(count));
    // The algorithms reduce in place: every iteration starts from fresh inputs (untimed), then
    // a barrier, so that each iteration's time is one all-reduce from a common start.
    auto run_once = [&]() {
      std::memcpy(data.data(), source.data(), count * sizeof(float));
      barrier.run();
      const auto start = std::chrono::steady_clock::now();
      allreduce->run();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    for (int64_t i = 0; i < common.warmup_iters; ++i) run_once();
    std::vector<double> seconds(static_cast<size_t>(common.iters));
    for (double& s : seconds) s = run_once();
    AllreduceDoubles(context, &seconds, gloo::ReductionFunction<double>::max);

    std::vector<double> wrong = {0};
    if (common.check) {
      run_once();
      wrong[0] = static_cast<double>(CountWrong(data.data(), count, options.size));
      AllreduceDoubles(context, &wrong, gloo::ReductionFunction<double>::sum);
    }
    if (options.rank == 0) {
      PrintResult(bytes, Summarise(seconds), static_cast<int64_t>(wrong[0]), options.size);
    }
  }
  barrier.run();  // nobody tears its pairs down while another rank still reads from them
  return 0;
}

}  // namespace
}  // namespace baton::peerbench

int main(int argc, char** argv) {
  baton::peerbench::GlooOptions options;
  const std::string error = baton::peerbench::Parse(argc, argv, &options);
  if (!error.empty()) {
    std::fprintf(stderr, "gloo_allreduce_bench: %s\n", error.c_str());
    baton::peerbench::Usage();
    return 2;
  }
  try {
    return baton::peerbench::Run(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_allreduce_bench: rank %d: %s\n", options.rank, e.what());
    return 1;
  }
}
