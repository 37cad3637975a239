// ZeRO (DESIGN.md "Sharded training state"): which part of each unit this rank owns, the unit slots of stages
// 2 and 3 (gradients reduce-scattered out of them, weights all-gathered into them, the next unit prefetched),
// the gradient reduction after the backward, the compute-weight refresh after an update, and the conversion
// between this rank's local buffers and full, unsharded tensors (checkpoints, tests).
#include <chrono>
#include <cstring>
#include <map>

#include "framework/model/model_internal.h"
#include "kernels/ops.h"

namespace rt {

int64_t full_numel(const ParamEntry& e) {
  int64_t n = 1;
  for (int64_t d : e.full_shape) n *= d;
  return n;
}


void extract_piece(const ParamEntry& e, int64_t first, int64_t last, const float* full, float* piece) {
  for (int64_t i = first; i < last; ++i) piece[i - first] = full[full_index(e, i)];
}

void add_piece(const ParamEntry& e, int64_t first, int64_t last, const float* piece, float* full) {
  for (int64_t i = first; i < last; ++i) full[full_index(e, i)] += piece[i - first];
}

Model::OwnedRange Model::owned(int unit) const {
  const ParamUnit& u = layout_.units[size_t(unit)];
  const int64_t per = u.numel / shards_;
  OwnedRange r;
  r.flat_begin = u.offset + per * shard_rank_;
  r.flat_end = r.flat_begin + per;
  r.local_begin = u.offset / shards_;
  return r;
}

std::vector<Model::Piece> Model::owned_pieces() const {
  std::vector<Piece> out;
  for_each_owned_piece([&](const ParamEntry& e, int64_t at, int64_t first, int64_t last) {
    out.push_back({&e, at, first, last});
  });
  return out;
}

std::vector<Model::Piece> Model::writer_pieces() const {
  std::vector<Piece> out;
  const int split = shards_ == 1 ? comms_.dp_cp->size() : 1, part = shards_ == 1 ? comms_.dp_cp->rank() : 0;
  for (const Piece& p : owned_pieces()) {
    if (!p.entry->owner) continue;
    const int64_t n = p.last - p.first;
    const int64_t lo = p.first + n * part / split, hi = p.first + n * (part + 1) / split;
    if (lo < hi) out.push_back({p.entry, p.at + (lo - p.first), lo, hi});
  }
  return out;
}

void Model::build_local_runs() {
  runs_.clear();
  for (int u = 0; u < int(layout_.units.size()); ++u) {
    const ParamUnit& pu = layout_.units[size_t(u)];
    std::vector<const ParamEntry*> in_unit;
    for (const ParamEntry& e : params_)
      if (e.unit == u) in_unit.push_back(&e);
    std::sort(in_unit.begin(), in_unit.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
    const OwnedRange r = owned(u);
    for (size_t k = 0; k < in_unit.size(); ++k) {
      const ParamEntry& e = *in_unit[k];
      const int64_t span_end = k + 1 < in_unit.size() ? in_unit[k + 1]->offset : pu.offset + pu.numel;
      const int64_t lo = std::max(e.offset, r.flat_begin), hi = std::min(span_end, r.flat_end);
      if (lo >= hi) continue;
      const int64_t begin = r.local_begin + lo - r.flat_begin, end = begin + (hi - lo);
      if (!runs_.empty() && runs_.back().end == begin && runs_.back().decay == e.decay && runs_.back().owner == e.owner)
        runs_.back().end = end;
      else
        runs_.push_back({begin, end, e.decay, e.owner});
    }
  }
}

int Model::slot_of(int unit) const {
  if (unit == 0) return 0;
  if (unit == int(layout_.units.size()) - 1) return 1;
  return 2 + (unit - 1) % 2;
}

// ---- timed collectives ----

namespace {
double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

int Model::zero_gather(const Tensor& send, Tensor recv) {
  const double t0 = now_s();
  const int h = comms_.dp_cp->all_gather_start(send, recv).id;
  zero_stats_.host_s += now_s() - t0;
  zero_stats_.gathers += 1, zero_stats_.gathered_bytes += double(recv.nbytes());
  return h;
}

int Model::zero_reduce_scatter(const Tensor& send, Tensor recv) {
  const double t0 = now_s();
  const int h = comms_.dp_cp->reduce_scatter_sum_start(send, recv).id;
  zero_stats_.host_s += now_s() - t0;
  zero_stats_.reduce_scatters += 1, zero_stats_.scattered_bytes += double(send.nbytes());
  return h;
}

void Model::zero_wait(int handle) {
  const double t0 = now_s();
  comms_.dp_cp->wait({handle});
  zero_stats_.host_s += now_s() - t0;
}

// ---- weights ----------------------------------------------------------------------------------------------

void Model::prefetch_weights(int unit) {
  if (zero_ != 3) return;
  const int k = slot_of(unit);
  if (weight_slot_unit_[k] == unit) return;  // held, or already being gathered
  RT_CHECK(weight_pending_[k] < 0, "zero 3: the gather slot of unit " << layout_.units[size_t(unit)].name
                                                                     << " is still being filled for another unit");
  const ParamUnit& u = layout_.units[size_t(unit)];
  const OwnedRange r = owned(unit);
  const int64_t per = u.numel / shards_;
  const Tensor shard = compute_.slice(r.local_begin, r.local_begin + per);  // (per) act
  if (fp8_gather_ && fp8_gather_->covers(unit)) {
    // E4M3 codes and the 1-D parameters (framework/model/zero_fp8_gather.h); unit_weights decodes them into the slot.
    RT_CHECK(k >= 2, "zero 3: the fp8 gather serves the layer slots only, not unit " << u.name);
    const ZeroFp8Gather::Exchange x = fp8_gather_->encode(unit, k - 2, shard);
    weight_pending_[k] = zero_gather(x.codes_send, x.codes_recv);
    zero_stats_.fp8_code_bytes += double(x.codes_recv.nbytes());
    if (x.plain_recv.defined()) {
      fp8_plain_pending_[k] = zero_gather(x.plain_send, x.plain_recv);
      zero_stats_.fp8_side_bytes += double(x.plain_recv.nbytes());
    }
  } else {
    weight_pending_[k] = zero_gather(shard, weight_slot_[k].slice(0, u.numel));
  }
  weight_slot_unit_[k] = unit;
}

Tensor Model::unit_weights(int unit) {
  const ParamUnit& u = layout_.units[size_t(unit)];
  if (zero_ != 3) return compute_.slice(u.offset, u.offset + u.numel);
  const int k = slot_of(unit);
  prefetch_weights(unit);
  if (weight_pending_[k] >= 0) {
    zero_wait(weight_pending_[k]);
    weight_pending_[k] = -1;
    if (fp8_plain_pending_[k] >= 0) {
      zero_wait(fp8_plain_pending_[k]);
      fp8_plain_pending_[k] = -1;
    }
    if (fp8_gather_ && fp8_gather_->covers(unit)) fp8_gather_->decode(unit, k - 2, weight_slot_[k].slice(0, u.numel));
  }
  return weight_slot_[k].slice(0, u.numel);
}

void Model::sync_compute_weights() {
  if (zero_ == 0) {
    if (master_.defined() && compute_.data != master_.data) copy_cast(compute_, master_);  // none: loaded there
    return;
  }
  if (zero_ == 3) {
    // The shard is laid out like the master shard. Every gathered slot is stale now.
    copy_cast(compute_, master_);
    for (int k = 0; k < 4; ++k) {
      RT_CHECK(weight_pending_[k] < 0 && fp8_plain_pending_[k] < 0,
               "zero 3: a weight gather is still in flight when the weights change");
      weight_slot_unit_[k] = -1;
    }
    if (fp8_gather_) {  // the E4M3 gather's amaxes of the new weights, one pair of small all-gathers per change
      const double t0 = now_s();
      const double bytes = fp8_gather_->take_amaxes(compute_);
      zero_stats_.host_s += now_s() - t0;
      zero_stats_.gathers += bytes > 0 ? 1 : 0;
      zero_stats_.gathered_bytes += bytes, zero_stats_.fp8_side_bytes += bytes;
    }
    return;
  }
  // zero 1/2: this rank's shard into its place of the full copy, then every unit all-gathered in place.
  std::vector<int> gathers;
  for (int unit = 0; unit < int(layout_.units.size()); ++unit) {
    const OwnedRange r = owned(unit);
    const int64_t per = r.flat_end - r.flat_begin;
    copy_cast(compute_.slice(r.flat_begin, r.flat_end), master_.slice(r.local_begin, r.local_begin + per));
    const ParamUnit& u = layout_.units[size_t(unit)];
    gathers.push_back(zero_gather(compute_.slice(r.flat_begin, r.flat_end), compute_.slice(u.offset, u.offset + u.numel)));
  }
  for (int h : gathers) zero_wait(h);
}

// ---- gradients --------------------------------------------------------------------------------------------

Tensor Model::unit_grads(int unit) {
  const ParamUnit& u = layout_.units[size_t(unit)];
  if (zero_ <= 1) return full_grads_.slice(u.offset, u.offset + u.numel);
  return grad_slot_[slot_of(unit)].slice(0, u.numel);
}

void Model::begin_unit_grads(int unit) {
  if (zero_ <= 1) return;  // the full buffer was zeroed at the start of the step
  const int k = slot_of(unit);
  if (grad_pending_[k] >= 0) {  // the slot's previous unit is still being reduce-scattered out of it
    zero_wait(grad_pending_[k]);
    grad_pending_[k] = -1;
  }
  fill(unit_grads(unit), 0.f);
}

void Model::end_unit_grads(int unit) {
  if (zero_ <= 1) return;
  const int k = slot_of(unit);
  const OwnedRange r = owned(unit);
  const int64_t per = r.flat_end - r.flat_begin;
  grad_pending_[k] = zero_reduce_scatter(unit_grads(unit), grads_.slice(r.local_begin, r.local_begin + per));
}

void Model::reduce_gradients() {
  Comm& dp_cp = *comms_.dp_cp;
  if (zero_ == 0) {
    if (dp_cp.size() > 1) dp_cp.all_reduce_sum(grads_);
    return;
  }
  if (zero_ == 1) {
    std::vector<int> posted;
    for (int unit = 0; unit < int(layout_.units.size()); ++unit) {
      const OwnedRange r = owned(unit);
      const int64_t per = r.flat_end - r.flat_begin;
      posted.push_back(zero_reduce_scatter(unit_grads(unit), grads_.slice(r.local_begin, r.local_begin + per)));
    }
    for (int h : posted) zero_wait(h);
    return;
  }
  for (int& h : grad_pending_) {
    if (h >= 0) zero_wait(h);
    h = -1;
  }
}

// ---- full tensors <-> local buffers -----------------------------------------------------------------------

// Sums a host vector over `comm`, chunk by chunk through a device buffer (the comm may be NCCL).
void Model::sum_over(Comm& comm, std::vector<float>& values) {
  if (comm.size() == 1) return;
  const int64_t chunk = gather_scratch_.numel();
  for (int64_t begin = 0; begin < int64_t(values.size()); begin += chunk) {
    const int64_t len = std::min<int64_t>(chunk, int64_t(values.size()) - begin);
    Tensor part = gather_scratch_.slice(0, len);
    copy_host_to_tensor(part, values.data() + begin);
    comm.all_reduce_sum(part);
    copy_tensor_to_host(values.data() + begin, part);
  }
}

std::vector<HostTensor> Model::gather_full(const Tensor& flat, const std::string& prefix) {
  RT_CHECK(flat.numel() == weights().numel(), "gather_full: the buffer has " << flat.numel()
                                                  << " elements but the local buffers have " << weights().numel());
  std::map<std::string, size_t> index;
  std::vector<HostTensor> out;
  out.reserve(params_.size());
  for (const ParamEntry& e : params_) {
    index[e.name] = out.size();
    out.push_back({prefix + e.name, e.full_shape, std::vector<float>(size_t(full_numel(e)), 0.f)});
  }
  std::vector<float> piece;
  for_each_owned_piece([&](const ParamEntry& e, int64_t at, int64_t first, int64_t last) {
    if (!e.owner) return;
    piece.resize(size_t(last - first));
    copy_cast(host_f32(piece), flat.slice(at, at + (last - first)));  // f32, or the compute dtype (weights())
    add_piece(e, first, last, piece.data(), out[index[e.name]].values.data());
  });
  for (HostTensor& t : out) {
    if (shards_ > 1) sum_over(*comms_.dp_cp, t.values);
    if (shape_.tp > 1) sum_over(*comms_.tp, t.values);
  }
  return out;
}

void Model::scatter_full(Tensor flat, const std::vector<HostTensor>& tensors, const std::string& prefix) {
  std::map<std::string, const HostTensor*> by_name;
  for (const HostTensor& t : tensors) by_name[t.name] = &t;
  for (const ParamEntry& e : params_) {
    auto it = by_name.find(prefix + e.name);
    RT_CHECK(it != by_name.end(), "checkpoint has no tensor '" << prefix + e.name
                                                               << "'; it was written for a different model config");
    const HostTensor& t = *it->second;
    RT_CHECK(t.shape == e.full_shape && int64_t(t.values.size()) == full_numel(e),
             "checkpoint tensor '" << t.name << "' has a different shape than the model expects; "
                                   << "check model.* in the config against the checkpoint's metadata");
  }
  RT_CHECK(by_name.size() >= params_.size(), "checkpoint holds fewer tensors than the model");
  fill(flat, 0.f);  // the alignment gaps between parameters stay zero
  std::vector<float> piece;
  for_each_owned_piece([&](const ParamEntry& e, int64_t at, int64_t first, int64_t last) {
    piece.resize(size_t(last - first));
    extract_piece(e, first, last, by_name[prefix + e.name]->values.data(), piece.data());
    copy_cast(flat.slice(at, at + (last - first)), host_f32(piece));  // into f32, or the compute dtype (weights())
  });
}

void Model::reduce_shared_kv_grads() {
  if (shape_.tp == 1 || shape_.Hkv >= shape_.tp) return;
  // Every tp rank owns the same local range of each unit (the layouts are identical), so the sharers of a KV
  // head hold the same piece: placed in a full tensor at their head's rows, summed over tp, taken back.
  std::vector<float> piece, full;
  for_each_owned_piece([&](const ParamEntry& e, int64_t at, int64_t first, int64_t last) {
    if (e.shard != ShardKind::kv_replicated) return;
    Tensor g = grads_.slice(at, at + (last - first));
    piece.resize(size_t(last - first));
    full.assign(size_t(full_numel(e)), 0.f);
    copy_tensor_to_host(piece.data(), g);
    add_piece(e, first, last, piece.data(), full.data());
    sum_over(*comms_.tp, full);
    extract_piece(e, first, last, full.data(), piece.data());
    copy_host_to_tensor(g, piece.data());
  });
}

}  // namespace rt
