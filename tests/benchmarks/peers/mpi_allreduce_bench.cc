// MPI all-reduce benchmark for scripts/compare_allreduce.sh: MPI_Allreduce of float32 with
// MPI_SUM, out of place, over whatever the launcher selects (the script picks Open MPI's TCP BTL
// across network namespaces, or its shared-memory BTL on one host).
//
//   mpirun -np N [--mca ...] mpi_allreduce_bench [-b 8 -e 64M -n 20 -w 5 -c 1]
//
// Output: see peer_bench_common.h.
#include <mpi.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/benchmarks/peers/peer_bench_common.h"

namespace baton::peerbench {
namespace {

void Usage() {
  std::fprintf(stderr,
               "Usage: mpirun -np N mpi_allreduce_bench [options]\n"
               "Float32 sum MPI_Allreduce; rank 0 prints one RESULT line per size.\n%s",
               CommonUsage());
}

int Run(const Options& options) {
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == 0) {
    char library[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(library, &length);
    const std::string first_line(library, strcspn(library, "\n,"));
    PrintHeader(first_line.c_str(), "MPI_Allreduce", size, options);
  }
  const size_t max_count = static_cast<size_t>(options.max_bytes / 4);
  std::vector<float> send(max_count);
  std::vector<float> recv(max_count);
  FillInput(send.data(), max_count, rank);

  for (int64_t bytes : Sizes(options)) {
    const int count = static_cast<int>(bytes / 4);
    auto run_once = [&]() {
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      MPI_Allreduce(send.data(), recv.data(), count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      return MPI_Wtime() - start;
    };
    for (int64_t i = 0; i < options.warmup_iters; ++i) run_once();
    std::vector<double> seconds(static_cast<size_t>(options.iters));
    for (double& s : seconds) s = run_once();
    std::vector<double> slowest(seconds.size());
    MPI_Reduce(seconds.data(), slowest.data(), static_cast<int>(seconds.size()), MPI_DOUBLE,
               MPI_MAX, 0, MPI_COMM_WORLD);

    long long wrong = 0;
    if (options.check) {
      std::memset(recv.data(), 0xA5, recv.size() * sizeof(float));  // a stale result must not pass
      run_once();
      const long long mine = CountWrong(recv.data(), static_cast<size_t>(count), size);
      MPI_Reduce(&mine, &wrong, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    }
    if (rank == 0) PrintResult(bytes, Summarise(slowest), wrong, size);
  }
  return 0;
}

}  // namespace
}  // namespace baton::peerbench

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  baton::peerbench::Options options;
  std::string error;
  for (int i = 1; i < argc && error.empty(); ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      baton::peerbench::Usage();
      MPI_Finalize();
      return 0;
    }
    if (!baton::peerbench::ParseCommonOption(argc, argv, &i, &options, &error)) {
      error = "unknown option " + arg;
    }
  }
  if (error.empty()) error = baton::peerbench::ValidateOptions(options);
  if (!error.empty()) {
    std::fprintf(stderr, "mpi_allreduce_bench: %s\n", error.c_str());
    baton::peerbench::Usage();
    MPI_Finalize();
    return 2;
  }
  const int status = baton::peerbench::Run(options);
  MPI_Finalize();
  return status;
}
