// MpiComm: the Comm of CPU ranks (DESIGN.md "Core types"). Tensors on the CPU go to MPI directly.
// CUDA tensors are staged through host buffers (HostStaging below): copied to the host before a send or a
// collective, received on the host and copied back in wait(). That lets several ranks share one GPU in
// tests, which NCCL refuses. With CUDA built in, the staging buffers are pinned (cudaHostAlloc, once per
// buffer at first use; parallel/comm/cuda/pinned_host.h).
#pragma once
#include <mpi.h>

#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

#include "parallel/comm/comm.h"

namespace rt {

// Host buffers that mirror device tensors during MPI calls. A CPU tensor is its own host copy.
class HostStaging {
 public:
  ~HostStaging();
  // A host tensor with t's dtype and shape; holds t's bytes when copy_in. t itself when t is on the CPU.
  Tensor acquire(const Tensor& t, bool copy_in);
  // Copies host back into t when copy_out (and t is not on the CPU), then returns the buffer to the pool.
  void release(const Tensor& t, const Tensor& host, bool copy_out);

 private:
  struct Buffer {
    void* data;
    size_t bytes;
    bool busy;
  };
  void* allocate(size_t bytes);  // the pinned-memory hook for the CUDA backend
  void deallocate(void* data);
  std::vector<Buffer> pool_;
};

class MpiComm final : public Comm {
 public:
  // Wraps `comm`; MPI must be initialised. When `owned`, the communicator is freed in the destructor.
  MpiComm(MPI_Comm comm, bool owned);
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  void all_reduce_sum(Tensor t) override;           // f32, bf16 (summed in f32 on the host)
  void all_reduce_sum(double* values, int count) override;
  void broadcast(Tensor t, int root) override;      // any dtype
  void barrier() override;
  ExchangeHandle ring_exchange_start(const Tensor& send, Tensor recv) override;
  void wait(ExchangeHandle handle) override;
  ExchangeHandle peer_exchange_start(const std::vector<PeerTransfer>& sends,
                                     const std::vector<PeerTransfer>& recvs) override;
  // f32 (MPI_Ireduce_scatter_block, summed in f32) / any dtype (MPI_Iallgather of bytes). GPU tensors are staged
  // through the host: the send is copied out when the collective is posted, the result copied back in wait().
  ExchangeHandle reduce_scatter_sum_start(const Tensor& send, Tensor recv) override;
  ExchangeHandle all_gather_start(const Tensor& send, Tensor recv) override;
  // MPI_Ialltoall of bytes; GPU tensors staged through the host like the ring exchange.
  ExchangeHandle all_to_all_start(const Tensor& send, Tensor recv) override;
  std::shared_ptr<Comm> split(int color, int key) override;

  MPI_Comm handle() const { return comm_; }

 private:
  // One posted exchange: its requests and the staged tensors to release when it completes.
  struct Pending {
    std::vector<MPI_Request> requests;
    Tensor send, send_host, recv, recv_host;
    std::vector<std::pair<Tensor, Tensor>> peer_sends, peer_recvs;  // peer_exchange_start: (tensor, host copy)
  };
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
  int next_id_ = 0;
  std::unordered_map<int, Pending> pending_;
  HostStaging staging_;
  std::vector<float> widened_;  // bf16 all-reduce: the values in f32 (host)
};

// MPI_COMM_WORLD as a Comm (not owned). MPI must already be initialised by main.
std::shared_ptr<Comm> make_mpi_world_comm();

}  // namespace rt
