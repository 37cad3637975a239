#include "framework/model/optimizer.h"

#include <cmath>

#include "kernels/ops.h"

namespace rt {

float learning_rate(const OptimConfig& o, int64_t step, int64_t total_steps) {
  if (o.warmup_steps > 0 && step <= o.warmup_steps) return o.lr * float(step) / float(o.warmup_steps);
  const int64_t decay_steps = total_steps - o.warmup_steps;
  if (decay_steps <= 0) return o.lr;
  const double progress = std::min(1.0, double(step - o.warmup_steps) / double(decay_steps));
  return float(o.min_lr + 0.5 * (o.lr - o.min_lr) * (1.0 + std::cos(M_PI * progress)));
}

AdamW::AdamW(const OptimConfig& config, Model& model, Arena& arena) : config_(config), model_(model) {
  const int64_t P = model.master().numel();
  m_ = arena.alloc(DType::f32, {P}, model.zero() > 0 ? "adam m (f32 shard)" : "adam m (f32)");  // (local)
  v_ = arena.alloc(DType::f32, {P}, model.zero() > 0 ? "adam v (f32 shard)" : "adam v (f32)");  // (local)
  clip_ = arena.alloc(DType::f32, {4}, "grad norm^2, clip factor, skipped steps, loss check (f32)");  // (4)
}

void AdamW::zero_state() {
  fill(m_, 0.f);
  fill(v_, 0.f);
  fill(clip_, 0.f);
}

void AdamW::step(int64_t step, float lr) {
  // The global norm on the device: every rank adds the squares of the shards it owns (sharded tensors, one
  // copy of replicated ones and of shared KV heads), then the owners' sums are added over tp.
  const Tensor sumsq = clip_.slice(0, 1), scale = clip_.slice(1, 2);  // (1), (1)
  const Tensor grads = model_.grads();
  fill(sumsq, 0.f);
  for (const Model::LocalRun& r : model_.local_runs())
    if (r.owner) sum_squares_accumulate(grads.slice(r.begin, r.end), sumsq);
  // ZeRO: each rank holds a disjoint shard of the gradients, so the shards' sums add up over dp x cp.
  if (model_.shard_count() > 1) model_.dp_cp_comm().all_reduce_sum(sumsq);
  if (model_.shape().tp > 1) model_.tp_comm().all_reduce_sum(sumsq);
  grad_clip_scale(sumsq, clip_.slice(1, 3), config_.grad_clip);  // NaN factor + a counted skip if not finite

  AdamWArgs args;
  args.lr = lr, args.beta1 = config_.beta1, args.beta2 = config_.beta2, args.eps = config_.eps;
  args.step = step;
  // Weight decay on 2-D weights only. At zero 0 a bf16 compute copy is written by the update itself; at
  // zero >= 1 the updated shard is refreshed into the compute weights afterwards (copied and all-gathered).
  const Tensor master = model_.master(), compute = model_.compute();
  const bool lowp = model_.zero() == 0 && compute.data != master.data;
  const Tensor clip_factor = scale;  // always read: besides clipping it carries the guard's skip
  for (const Model::LocalRun& r : model_.local_runs()) {
    args.weight_decay = r.decay ? config_.weight_decay : 0.f;
    adamw(master.slice(r.begin, r.end), grads.slice(r.begin, r.end), m_.slice(r.begin, r.end),
          v_.slice(r.begin, r.end), args, lowp ? compute.slice(r.begin, r.end) : Tensor{}, clip_factor);
  }
  if (model_.zero() > 0) model_.sync_compute_weights();
}

double AdamW::last_grad_norm() const {
  float sumsq = 0;
  copy_cast(Tensor(&sumsq, DType::f32, Device::cpu(), {1}), clip_.slice(0, 1));  // a host wait on CUDA
  return std::sqrt(double(sumsq));
}

void AdamW::guard_losses(const Tensor& losses) {
  const Tensor check = clip_.slice(3, 4);  // (1)
  fill(check, 0.f);
  sum_squares_accumulate(losses, check);
  scale_inplace(check, 0.f);  // finite -> 0, inf or NaN -> NaN
  add_inplace(model_.grads().slice(0, 1), check);
}

int64_t AdamW::skipped_steps() const {
  float skipped = 0;
  copy_cast(Tensor(&skipped, DType::f32, Device::cpu(), {1}), clip_.slice(2, 3));  // a host wait on CUDA
  return int64_t(skipped);
}

std::vector<HostTensor> AdamW::export_state() {
  std::vector<HostTensor> out = model_.gather_full(m_, "exp_avg.");
  std::vector<HostTensor> v = model_.gather_full(v_, "exp_avg_sq.");
  for (HostTensor& t : v) out.push_back(std::move(t));
  return out;
}

void AdamW::import_state(const std::vector<HostTensor>& tensors) {
  zero_state();  // alignment gaps between parameters stay zero
  model_.scatter_full(m_, tensors, "exp_avg.");
  model_.scatter_full(v_, tensors, "exp_avg_sq.");
}

}  // namespace rt
