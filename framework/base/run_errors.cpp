#include "framework/base/run_errors.h"

#include <mpi.h>

#include <climits>
#include <regex>
#include <vector>

namespace rt {

std::string user_message(const std::string& message, int code) {
  if (code == kExitFailure) return message;
  static const std::regex location(R"( \[[^\] ]+\.(cpp|h|cu|cuh|inc):[0-9]+\])");
  return std::regex_replace(message, location, "");
}

void agree_on(const std::function<void()>& body, int code) {
  std::string message;
  int my_code = 0;
  try {
    body();
  } catch (const RunError& e) {
    message = e.what(), my_code = e.code();
  } catch (const std::exception& e) {
    message = e.what(), my_code = code;
  }
  int initialized = 0, finalized = 0, size = 1, rank = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  }
  if (size == 1) {
    if (my_code != 0) throw AgreedError(my_code, message, 0);
    return;
  }
  // The lowest failing rank speaks for all.
  int mine = my_code != 0 ? rank : INT_MAX, first = INT_MAX;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (first == INT_MAX) return;
  int header[2] = {my_code, int(message.size())};
  MPI_Bcast(header, 2, MPI_INT, first, MPI_COMM_WORLD);
  std::vector<char> text(size_t(header[1]) + 1, '\0');
  if (rank == first) std::copy(message.begin(), message.end(), text.begin());
  MPI_Bcast(text.data(), header[1], MPI_CHAR, first, MPI_COMM_WORLD);
  throw AgreedError(header[0], std::string(text.data(), size_t(header[1])), first);
}

}  // namespace rt
