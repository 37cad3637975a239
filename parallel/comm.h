// Communicator interface (DESIGN.md "Core types"). Implementations: LocalComm (size 1, no MPI),
// MpiComm (CPU tensors; GPU tensors staged through pinned host memory), NcclComm (GPU).
#pragma once
#include <memory>
#include <string>

#include "kernels/tensor.h"

namespace rt {

// Identifies one posted, not yet completed exchange.
struct ExchangeHandle {
  int id = -1;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;  // "local", "mpi", "nccl"

  // In place, element-wise sum over all ranks. f32 (and bf16 on GPU).
  virtual void all_reduce_sum(Tensor t) = 0;
  // Host scalars, summed in double.
  virtual void all_reduce_sum(double* values, int count) = 0;
  virtual void broadcast(Tensor t, int root) = 0;
  virtual void barrier() = 0;

  // Non-blocking ring step: sends `send` to (rank+1) % size and receives `recv` (same byte size) from
  // (rank-1+size) % size, posted together. The buffers must not be touched until wait() returns.
  virtual ExchangeHandle ring_exchange_start(const Tensor& send, Tensor recv) = 0;
  virtual void wait(ExchangeHandle handle) = 0;

  // Collective: a new communicator of the ranks that pass the same `color`, ranked by `key`. Used by
  // ProcessGrid to build the tp, cp, dp and dp x cp groups. The default refuses, naming the comm.
  virtual std::shared_ptr<Comm> split(int color, int key);
};

// A ring of one: every collective is the identity. Used by single-process runs and unit tests.
class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "local"; }
  void all_reduce_sum(Tensor) override {}
  void all_reduce_sum(double*, int) override {}
  void broadcast(Tensor, int) override {}
  void barrier() override {}
  ExchangeHandle ring_exchange_start(const Tensor& send, Tensor recv) override;
  void wait(ExchangeHandle) override {}
  std::shared_ptr<Comm> split(int, int) override { return std::make_shared<LocalComm>(); }
};

}  // namespace rt
