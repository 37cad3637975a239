// Communicator interface (DESIGN.md "Core types"). Implementations: LocalComm (size 1, no MPI),
// MpiComm (CPU tensors; GPU tensors staged through pinned host memory), NcclComm (GPU).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "kernels/tensor.h"

namespace rt {

// Identifies one posted, not yet completed exchange.
struct ExchangeHandle {
  int id = -1;
};

// One side of a point-to-point transfer: the buffer and the rank it goes to (a send) or comes from (a receive).
struct PeerTransfer {
  Tensor buf;
  int peer = -1;
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

  // Non-blocking group of point-to-point transfers, posted together and completed by one wait(): each send goes to
  // its peer, each receive comes from its peer (a ring hop is one send to rank+1 and one receive from rank-1; the
  // ring of packed documents skips the hops nobody needs and sends dK/dV straight home, parallel/schedule/ring_hops.h).
  // Every rank must post its groups in the same order, possibly empty ones, and a send in a rank's k-th group must
  // meet a receive of the same byte size in its peer's k-th group. At most one send and one receive per peer.
  // The buffers must not be touched until wait() returns (on NCCL: until the compute stream has waited).
  // The default refuses, naming the comm.
  virtual ExchangeHandle peer_exchange_start(const std::vector<PeerTransfer>& sends,
                                             const std::vector<PeerTransfer>& recvs);

  // Non-blocking collectives over all ranks (ZeRO, DESIGN.md "Sharded training state"), completed by wait()
  // like an exchange; several may be outstanding, and every rank must post them in the same order.
  //   reduce_scatter_sum: send (size * n) f32 is summed over the ranks; rank r receives elements
  //                       [r * n, (r + 1) * n) of the sum in recv (n). send and recv must not overlap.
  //   all_gather:         send (n) of any dtype from every rank, concatenated in rank order into recv
  //                       (size * n). send may be recv's own block r (in place).
  // Neither buffer may be touched until wait() returns (on NCCL: until the compute stream has waited).
  virtual ExchangeHandle reduce_scatter_sum_start(const Tensor& send, Tensor recv) = 0;
  virtual ExchangeHandle all_gather_start(const Tensor& send, Tensor recv) = 0;
  // Non-blocking all-to-all of equal chunks (the head exchange of parallel/cp/context_attention.h): send and recv
  // (size * n) of one dtype; chunk r of send goes to rank r, and chunk r of recv comes from rank r (chunk rank()
  // is copied locally). send and recv must not overlap. Completed by wait() like an exchange, posted in the same
  // order on every rank. The default refuses, naming the communicator.
  virtual ExchangeHandle all_to_all_start(const Tensor& send, Tensor recv);

  // Collective: a new communicator of the ranks that pass the same `color`, ranked by `key`. Used by
  // ProcessGrid to build the tp, cp, dp and dp x cp groups. The default refuses, naming the comm.
  virtual std::shared_ptr<Comm> split(int color, int key);
};

// A ring of one: every collective is the identity. Used by single-process runs and unit tests.
// Checks a peer exchange's peers and buffers, and the shapes of a reduce-scatter / all-gather, over `size` ranks
// (shared by the implementations).
void check_peer_exchange(const std::vector<PeerTransfer>& sends, const std::vector<PeerTransfer>& recvs, int size,
                         const char* comm);
void check_reduce_scatter(const Tensor& send, const Tensor& recv, int size, const char* comm);
void check_all_gather(const Tensor& send, const Tensor& recv, int size, const char* comm);
void check_all_to_all(const Tensor& send, const Tensor& recv, int size, const char* comm);

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
  ExchangeHandle peer_exchange_start(const std::vector<PeerTransfer>& sends,
                                     const std::vector<PeerTransfer>& recvs) override;  // a copy to itself
  ExchangeHandle reduce_scatter_sum_start(const Tensor& send, Tensor recv) override;  // a copy
  ExchangeHandle all_gather_start(const Tensor& send, Tensor recv) override;          // a copy
  ExchangeHandle all_to_all_start(const Tensor& send, Tensor recv) override;          // a copy
  std::shared_ptr<Comm> split(int, int) override { return std::make_shared<LocalComm>(); }
};

}  // namespace rt
