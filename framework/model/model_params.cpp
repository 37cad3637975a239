// The parameter table (names, full shapes, tp shards, flat offsets), deterministic initialisation, and
// the conversion between this rank's flat shards and full unsharded tensors (checkpoints).
#include <cmath>
#include <cstring>
#include <map>

#include "framework/model/model_internal.h"
#include "kernels/ops.h"

namespace rt {

const char* shard_kind_name(ShardKind kind) {
  switch (kind) {
    case ShardKind::replicated: return "replicated";
    case ShardKind::column: return "column";
    case ShardKind::row: return "row";
    case ShardKind::kv_replicated: return "kv-replicated";
  }
  return "?";
}

ActivationCheckpointing parse_checkpointing(const std::string& name) {
  if (name == "none") return ActivationCheckpointing::none;
  if (name == "selective") return ActivationCheckpointing::selective;
  if (name == "full") return ActivationCheckpointing::full;
  RT_CHECK(false, "train.checkpointing: '" << name << "' is not supported; use none, selective or full");
}

ModelShape make_model_shape(const ModelConfig& m, int tp, int tp_rank, int64_t batch, int64_t local_tokens) {
  RT_CHECK(m.n_layer > 0 && m.d_model > 0 && m.n_head > 0 && m.n_kv_head > 0 && m.vocab_size > 0 && m.d_ff > 0,
           "model: n_layer, d_model, n_head, n_kv_head, vocab_size and d_ff must be positive");
  RT_CHECK(m.d_model % m.n_head == 0,
           "model.d_model (" << m.d_model << ") must be divisible by model.n_head (" << m.n_head << ")");
  RT_CHECK(m.head_dim() % 2 == 0, "head_dim = d_model / n_head = " << m.head_dim() << " must be even for RoPE");
  RT_CHECK(m.n_head % m.n_kv_head == 0,
           "model.n_kv_head (" << m.n_kv_head << ") must divide model.n_head (" << m.n_head << ")");
  RT_CHECK(m.mlp == "gelu" || m.mlp == "swiglu", "model.mlp: '" << m.mlp << "' must be gelu or swiglu");
  RT_CHECK(tp >= 1 && m.n_head % tp == 0,
           "model.n_head (" << m.n_head << ") must be divisible by parallel.tp (" << tp << ")");
  RT_CHECK(m.d_ff % tp == 0, "model.d_ff (" << m.d_ff << ") must be divisible by parallel.tp (" << tp << ")");
  RT_CHECK(m.n_kv_head % tp == 0 || tp % m.n_kv_head == 0,
           "model.n_kv_head (" << m.n_kv_head << ") and parallel.tp (" << tp
                               << ") must divide one another (KV heads are split, or replicated when fewer)");
  ModelShape s;
  s.L = m.n_layer, s.C = m.d_model, s.H = m.n_head, s.Hkv = m.n_kv_head, s.D = m.head_dim(), s.F = m.d_ff;
  s.V = m.vocab_size;
  s.tp = tp, s.tp_rank = tp_rank;
  s.Hl = s.H / tp;
  s.Hkvl = s.Hkv >= tp ? s.Hkv / tp : 1;
  s.Fl = s.F / tp;
  s.B = batch, s.n = local_tokens;
  s.swiglu = m.mlp == "swiglu";
  s.tied = m.tied_embeddings;
  return s;
}

namespace {

constexpr int64_t kOffsetAlign = 64;  // elements: 256-byte aligned f32 slices

ParamEntry make_entry(const std::string& name, std::vector<int64_t> full, ShardKind kind, int tp, int tp_rank,
                      float init_std, int64_t kv_head_dim = 0, int64_t n_kv_head = 0) {
  ParamEntry e;
  e.name = name;
  e.full_shape = full;
  e.shard = kind;
  e.decay = full.size() == 2;
  e.init_std = init_std;
  const int64_t rows = full.size() == 2 ? full[0] : 1;
  const int64_t cols = full.back();
  e.row_begin = 0, e.row_end = rows, e.col_begin = 0, e.col_end = cols;
  switch (kind) {
    case ShardKind::replicated: e.owner = tp_rank == 0; break;
    case ShardKind::column:
      e.row_begin = rows / tp * tp_rank, e.row_end = rows / tp * (tp_rank + 1);
      break;
    case ShardKind::row:
      e.col_begin = cols / tp * tp_rank, e.col_end = cols / tp * (tp_rank + 1);
      break;
    case ShardKind::kv_replicated: {
      const int sharers = tp / int(n_kv_head);  // ranks that read the same KV head
      const int64_t head = tp_rank / sharers;
      e.row_begin = head * kv_head_dim, e.row_end = (head + 1) * kv_head_dim;
      e.owner = tp_rank % sharers == 0;
      break;
    }
  }
  if (full.size() == 2) e.local_shape = {e.row_end - e.row_begin, e.col_end - e.col_begin};
  else e.local_shape = {e.col_end - e.col_begin};
  e.numel = (e.row_end - e.row_begin) * (e.col_end - e.col_begin);
  return e;
}

// splitmix64: a small, portable generator, so the initial weights are the same on every platform.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return (double(next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }  // (0, 1)
};

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The full tensor of one parameter, row-major over full_shape.
std::vector<float> generate_full(const ParamEntry& e, uint64_t seed) {
  int64_t numel = 1;
  for (int64_t d : e.full_shape) numel *= d;
  std::vector<float> full(size_t(numel), 1.f);
  if (e.init_std == 0) return full;
  SplitMix64 rng{seed ^ fnv1a(e.name)};
  for (int64_t i = 0; i < numel; i += 2) {  // Box-Muller: two normals per pair of uniforms
    const double r = std::sqrt(-2.0 * std::log(rng.uniform()));
    const double t = 2.0 * M_PI * rng.uniform();
    full[size_t(i)] = float(e.init_std * r * std::cos(t));
    if (i + 1 < numel) full[size_t(i + 1)] = float(e.init_std * r * std::sin(t));
  }
  return full;
}

}  // namespace

namespace {

std::vector<ParamEntry> unordered_param_table(const ModelConfig& m, int tp, int tp_rank) {
  const ModelShape s = make_model_shape(m, tp, tp_rank, 1, 1);
  const float std0 = 0.02f;
  const float std_resid = 0.02f / std::sqrt(2.f * float(s.L));
  const ShardKind kv_kind = s.Hkv >= tp ? ShardKind::column : ShardKind::kv_replicated;
  std::vector<ParamEntry> decayed, plain;
  decayed.push_back(make_entry("tok_embeddings.weight", {s.V, s.C}, ShardKind::replicated, tp, tp_rank, std0));
  for (int l = 0; l < s.L; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    decayed.push_back(make_entry(p + "attn.wq.weight", {s.H * s.D, s.C}, ShardKind::column, tp, tp_rank, std0));
    decayed.push_back(make_entry(p + "attn.wk.weight", {s.Hkv * s.D, s.C}, kv_kind, tp, tp_rank, std0, s.D, s.Hkv));
    decayed.push_back(make_entry(p + "attn.wv.weight", {s.Hkv * s.D, s.C}, kv_kind, tp, tp_rank, std0, s.D, s.Hkv));
    decayed.push_back(make_entry(p + "attn.wo.weight", {s.C, s.H * s.D}, ShardKind::row, tp, tp_rank, std_resid));
    if (s.swiglu) {
      decayed.push_back(make_entry(p + "mlp.w1.weight", {s.F, s.C}, ShardKind::column, tp, tp_rank, std0));
      decayed.push_back(make_entry(p + "mlp.w3.weight", {s.F, s.C}, ShardKind::column, tp, tp_rank, std0));
      decayed.push_back(make_entry(p + "mlp.w2.weight", {s.C, s.F}, ShardKind::row, tp, tp_rank, std_resid));
    } else {
      decayed.push_back(make_entry(p + "mlp.fc.weight", {s.F, s.C}, ShardKind::column, tp, tp_rank, std0));
      decayed.push_back(make_entry(p + "mlp.proj.weight", {s.C, s.F}, ShardKind::row, tp, tp_rank, std_resid));
    }
    plain.push_back(make_entry(p + "attn_norm.weight", {s.C}, ShardKind::replicated, tp, tp_rank, 0));
    plain.push_back(make_entry(p + "mlp_norm.weight", {s.C}, ShardKind::replicated, tp, tp_rank, 0));
  }
  if (!s.tied)
    decayed.push_back(make_entry("lm_head.weight", {s.V, s.C}, ShardKind::replicated, tp, tp_rank, std0));
  plain.push_back(make_entry("norm.weight", {s.C}, ShardKind::replicated, tp, tp_rank, 0));

  std::vector<ParamEntry> table = std::move(decayed);
  table.insert(table.end(), plain.begin(), plain.end());
  return table;
}

}  // namespace

static bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

int param_unit_of(const std::string& name, int n_layer) {
  if (name == "tok_embeddings.weight") return 0;
  if (name.rfind("layers.", 0) == 0) return 1 + std::stoi(name.substr(7));
  return n_layer + 1;  // norm.weight, lm_head.weight
}

ParamLayout build_param_layout(const ModelConfig& m, int tp, int tp_rank, int shard_count) {
  RT_CHECK(shard_count >= 1, "build_param_layout: shard_count " << shard_count << " must be >= 1");
  ParamLayout layout;
  layout.shard_count = shard_count;
  layout.table = unordered_param_table(m, tp, tp_rank);
  // Offsets unit by unit (embedding, layers 0..L-1, final norm + LM head), parameters within a unit in table
  // order; each parameter starts 64-element aligned, except SwiGLU's w3, which starts where w1 ends (no gap), so
  // that w1 and w3 are one (2Fl, C) span: the fused gate|up weight of one gemm (Model::layer_weights). Each unit
  // is padded to a multiple of 64 * shard_count so that its shards are equal and aligned. The table keeps its
  // order (checkpoint files do not depend on it: they hold each parameter by name).
  const int units = m.n_layer + 2;
  layout.units.resize(size_t(units));
  for (ParamEntry& e : layout.table) e.unit = param_unit_of(e.name, m.n_layer);
  const int64_t unit_align = kOffsetAlign * shard_count;
  int64_t offset = 0;
  for (int u = 0; u < units; ++u) {
    ParamUnit& pu = layout.units[size_t(u)];
    pu.name = u == 0 ? "embedding" : u == units - 1 ? "head" : "layers." + std::to_string(u - 1);
    pu.offset = offset;
    for (ParamEntry& e : layout.table) {
      if (e.unit != u) continue;
      e.offset = offset;
      const bool gate_of_pair = ends_with(e.name, ".mlp.w1.weight");  // w3 follows it directly
      offset += e.numel;
      if (!gate_of_pair) offset = (offset + kOffsetAlign - 1) / kOffsetAlign * kOffsetAlign;  // the next one aligned
    }
    offset = (offset + unit_align - 1) / unit_align * unit_align;
    pu.numel = offset - pu.offset;
  }
  layout.total = offset;
  return layout;
}

std::vector<ParamEntry> build_param_table(const ModelConfig& m, int tp, int tp_rank) {
  return build_param_layout(m, tp, tp_rank, 1).table;
}

int64_t count_parameters(const ModelConfig& m) {
  int64_t total = 0;
  for (const ParamEntry& e : build_param_table(m, 1, 0)) total += e.numel;
  return total;
}

const ParamEntry& Model::param(const std::string& name) const {
  for (const ParamEntry& e : params_)
    if (e.name == name) return e;
  RT_CHECK(false, "model has no parameter named '" << name << "'");
}

Tensor Model::param_view(const Tensor& unit_buffer, const std::string& name) const {
  const ParamEntry& e = param(name);
  const int64_t begin = e.offset - layout_.units[size_t(e.unit)].offset;
  Tensor t = unit_buffer.slice(begin, begin + e.numel);
  if (e.local_shape.size() == 2) return t.view({e.local_shape[0], e.local_shape[1]});
  return t;
}

Tensor Model::param_pair_view(const Tensor& unit_buffer, const std::string& first, const std::string& second) const {
  const ParamEntry& a = param(first);
  const ParamEntry& b = param(second);
  RT_CHECK(a.unit == b.unit && b.offset == a.offset + a.numel && a.local_shape.size() == 2 &&
               b.local_shape.size() == 2 && a.local_shape[1] == b.local_shape[1],
           "param_pair_view: '" << second << "' does not follow '" << first
                                << "' directly with the same columns (build_param_layout keeps them adjacent)");
  const int64_t begin = a.offset - layout_.units[size_t(a.unit)].offset;
  return unit_buffer.slice(begin, begin + a.numel + b.numel)
      .view({a.local_shape[0] + b.local_shape[0], a.local_shape[1]});
}

void Model::init_weights(uint64_t seed) {
  const Tensor w = weights();  // the f32 master, or the compute copy of a forward-only model
  fill(w, 0.f);  // the alignment gaps between parameters stay zero
  std::vector<float> local;
  for_each_owned_piece([&](const ParamEntry& e, int64_t at, int64_t first, int64_t last) {
    const std::vector<float> full = generate_full(e, seed);
    local.resize(size_t(last - first));
    extract_piece(e, first, last, full.data(), local.data());
    copy_cast(w.slice(at, at + (last - first)), host_f32(local));
  });
  sync_compute_weights();
}

void copy_host_to_tensor(Tensor dst, const void* host) {
  if (dst.numel() == 0) return;
  if (dst.device.is_cpu()) {
    std::memcpy(dst.data, host, dst.nbytes());
    return;
  }
  Tensor src = dst;
  src.data = const_cast<void*>(host);
  src.device = Device::cpu();
  copy_cast(dst, src);
}

void copy_tensor_to_host(void* host, const Tensor& src) {
  if (src.numel() == 0) return;
  if (src.device.is_cpu()) {
    std::memcpy(host, src.data, src.nbytes());
    return;
  }
  Tensor dst = src;
  dst.data = host;
  dst.device = Device::cpu();
  copy_cast(dst, src);
}

}  // namespace rt
