// validate_config: every constraint, checked before any work, each message naming the key and the fix.
// All problems are collected and reported together.
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "framework/config/config.h"
#include "framework/base/data_files.h"
#include "framework/config/rope_scaling.h"
#include "kernels/tensor.h"

namespace rt {

std::string fp8_attention_cuda_refusal(const Config& c) {
  if (!c.fp8.attention) return "";
  std::ostringstream outside;
  const char* sep = "";
  if (c.data.documents != "none")
    outside << sep << "data.documents=" << c.data.documents << " (a document mask)", sep = ", ";
  const ModelConfig& m = c.model;
  if (m.n_head >= 1 && m.d_model % m.n_head == 0 && m.head_dim() != 128)
    outside << sep << "head_dim=" << m.head_dim() << " (model.d_model / model.n_head = " << m.d_model << " / "
            << m.n_head << ")", sep = ", ";
  const int64_t cp = c.parallel.cp >= 1 ? c.parallel.cp : 1;
  if (c.data.seq_len % (128 * cp) != 0) {
    outside << sep << "data.seq_len=" << c.data.seq_len << " (not a multiple of 128";
    if (cp > 1) outside << " x parallel.cp=" << cp << ": each rank's rows";
    outside << ")";
  }
  const std::string what = outside.str();
  if (what.empty()) return "";
  return "fp8.attention=true on the GPU runs the sm_90a FP8 attention backward over causal sequences and their ring "
         "blocks (no packed documents, head_dim 128, data.seq_len / parallel.cp a multiple of 128), but this config "
         "has " + what + "; change those keys, set fp8.attention: false (FP8 linear layers stay on with "
         "train.precision: fp8), or use device: cpu (the CPU backend takes documents and head dims 64 / 128)";
}

namespace {

class Problems {
 public:
  template <class... Args>
  void add(const Args&... parts) {
    std::ostringstream os;
    (os << ... << parts);
    list_.push_back(os.str());
  }
  // "key=value must be >= 1 (...)"
  void at_least(const char* key, int64_t value, int64_t min, const char* what = "") {
    if (value < min) add(key, "=", value, " must be >= ", min, what);
  }
  void one_of(const char* key, const std::string& value, std::initializer_list<const char*> names) {
    for (const char* n : names)
      if (value == n) return;
    std::string options;
    for (const char* n : names) options += std::string(options.empty() ? "" : ", ") + n;
    add(key, "='", value, "' is not a valid choice; use one of: ", options);
  }
  const std::vector<std::string>& list() const { return list_; }

 private:
  std::vector<std::string> list_;
};

// An absolute path, or one with a '..' component: it can point outside the directory it is taken relative to.
bool leaves_directory(const std::string& relative) {
  const std::filesystem::path path(relative);
  if (path.is_absolute() || path.has_root_path()) return true;
  for (const auto& part : path)
    if (part == "..") return true;
  return false;
}

bool is_regular_file(const std::string& path, uint64_t* bytes) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  if (bytes) *bytes = uint64_t(st.st_size);
  return true;
}

bool is_directory(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void check_model(const Config& c, Problems& p) {
  const ModelConfig& m = c.model;
  p.at_least("model.n_layer", m.n_layer, 1);
  p.at_least("model.d_model", m.d_model, 1);
  p.at_least("model.n_head", m.n_head, 1);
  p.at_least("model.n_kv_head", m.n_kv_head, 1);
  p.at_least("model.vocab_size", m.vocab_size, 1);
  p.at_least("model.d_ff", m.d_ff, 1);
  p.one_of("model.mlp", m.mlp, {"gelu", "swiglu"});
  // > 1: a base of 1 or less gives every RoPE pair the same (or a growing) frequency. rope_frequencies says the
  // same; it runs below only for a base that passes here, so the error is said once.
  const bool rope_base_ok = m.rope_base > 1 && std::isfinite(m.rope_base);
  if (!rope_base_ok) p.add("model.rope_base=", m.rope_base, " must be a finite number > 1 (e.g. 10000 or 500000)");
  if (!(m.norm_eps > 0)) p.add("model.norm_eps=", m.norm_eps, " must be > 0 (e.g. 1e-5)");
  if (m.d_model < 1 || m.n_head < 1 || m.n_kv_head < 1) return;
  if (m.d_model % m.n_head != 0) {
    p.add("model.d_model=", m.d_model, " is not divisible by model.n_head=", m.n_head,
          "; choose d_model as a multiple of n_head (e.g. ", (m.d_model / m.n_head + 1) * m.n_head,
          ") or an n_head that divides d_model");
  } else if (m.head_dim() % 2 != 0) {
    p.add("head_dim = model.d_model / model.n_head = ", m.head_dim(),
          " is odd; RoPE rotates pairs, so choose d_model and n_head with an even quotient");
  }
  if (rope_base_ok && m.d_model % m.n_head == 0 && m.head_dim() % 2 == 0) {
    try {
      (void)rope_frequencies(m);
    } catch (const Error& e) {
      p.add(e.what());
    }
  }
  // Only where the config sets the shape: eval and generate take the model from the checkpoint (build_session
  // checks the head dim it gets), and the defaults' 16 would refuse a config without a model section.
  const bool shape_set = c.is_explicit("model.d_model") || c.is_explicit("model.n_head");
  if (c.device == "cuda" && shape_set && m.d_model % m.n_head == 0 && m.head_dim() != 64 && m.head_dim() != 128)
    p.add("head_dim = model.d_model / model.n_head = ", m.head_dim(), " but device=cuda, whose attention kernels take ",
          "head dims 64 and 128; change d_model / n_head, or use device: cpu");
  if (m.n_head % m.n_kv_head != 0)
    p.add("model.n_head=", m.n_head, " is not divisible by model.n_kv_head=", m.n_kv_head,
          "; each KV head serves a whole group of query heads, so use an n_kv_head that divides n_head");
}

// parallel.cp_a2a (DESIGN.md "All-to-all and the hybrid"): u divides cp, and tp x u divides the query heads. Each
// refusal names every number and values that would work.
void check_a2a(const Config& c, Problems& p) {
  const ParallelConfig& g = c.parallel;
  const int u = g.cp_a2a;
  if (u == 1 || g.cp_a2a_auto()) return;  // auto picks among the admissible u only
  if (g.cp % u != 0) {
    std::string ok;
    for (int d = 1; d <= g.cp; ++d)
      if (g.cp % d == 0) ok += (ok.empty() ? "" : ", ") + std::to_string(d);
    p.add("parallel.cp_a2a=", u, " does not divide parallel.cp=", g.cp,
          "; the ring runs over cp / cp_a2a ranks, so use a cp_a2a of ", ok, " (or cp a multiple of ", u, ")");
  }
  const int heads = c.model.n_head;
  if (heads >= 1 && heads % (g.tp * u) != 0) {
    std::string ok;
    for (int d = 1; d <= g.cp; ++d)
      if (g.cp % d == 0 && heads % (g.tp * d) == 0) ok += (ok.empty() ? "" : ", ") + std::to_string(d);
    p.add("parallel.tp x parallel.cp_a2a = ", g.tp, " x ", u, " = ", g.tp * u, " does not divide model.n_head=", heads,
          "; both split the query heads, so use a cp_a2a of ", ok.empty() ? "1" : ok, " with tp=", g.tp,
          ", or a tp whose product with ", u, " divides ", heads);
  }
}

void check_parallel(const Config& c, int world_size, Problems& p) {
  const ParallelConfig& g = c.parallel;
  p.at_least("parallel.dp", g.dp, 1);
  p.at_least("parallel.cp", g.cp, 1);
  p.at_least("parallel.tp", g.tp, 1);
  if (!g.cp_a2a_auto()) p.at_least("parallel.cp_a2a", g.cp_a2a, 1);
  p.one_of("parallel.layout", g.layout, {"auto", "contiguous", "zigzag", "striped", "balanced"});
  if (g.layout == "balanced" && c.data.documents != "eot")
    p.add("parallel.layout=balanced assigns positions to ranks by documents; set data.documents: eot, or use "
          "layout: zigzag");
  p.one_of("parallel.comm", g.comm, {"auto", "mpi", "nccl"});
  p.one_of("parallel.dkv_wire", g.dkv_wire, {"fp32", "bf16"});
  if (g.cp_scheme == CpSchemeSetting::gather && c.data.documents != "eot")
    p.add("parallel.cp_scheme=gather sends each rank the key rows its queries see under a document mask, but "
          "data.documents is ", c.data.documents, " (every query sees every earlier key, so the ring is the scheme); "
          "set data.documents: eot, or use cp_scheme: ring (or auto)");
  if (g.zero < 0 || g.zero > 3)
    p.add("parallel.zero=", g.zero, " is not a ZeRO stage; use 0 (replicated), 1 (optimizer state sharded), 2 (+ "
          "gradients) or 3 (+ weights)");
  p.one_of("device", c.device, {"auto", "cpu", "cuda"});
  if (!(g.timeout_s > 0)) p.add("parallel.timeout_s=", g.timeout_s, " must be > 0 seconds (default 600)");
  if (!(g.save_timeout_s > 0))
    p.add("parallel.save_timeout_s=", g.save_timeout_s, " must be > 0 seconds (default 3600)");
  if (g.comm == "nccl" && c.device == "cpu")
    p.add("parallel.comm=nccl needs GPU tensors but device=cpu; use parallel.comm: mpi (or auto) or device: cuda");
#ifndef RINGTRAIN_HAVE_CUDA
  if (c.device == "cuda")
    p.add("device=cuda but this build has no CUDA backend; use device: cpu (or auto), or rebuild with nvcc "
          "available (-DRINGTRAIN_CUDA=ON)");
  if (g.comm == "nccl") p.add("parallel.comm=nccl but this build has no CUDA/NCCL; use parallel.comm: mpi or auto");
#endif
  if (g.dp < 1 || g.cp < 1 || g.tp < 1 || (g.cp_a2a < 1 && !g.cp_a2a_auto())) return;
  check_a2a(c, p);
  const int64_t grid = int64_t(g.dp) * g.cp * g.tp;
  if (world_size > 0 && grid != world_size)
    p.add("parallel.dp*cp*tp = ", g.dp, "*", g.cp, "*", g.tp, " = ", grid, " but the job runs on ", world_size,
          " rank(s); change dp/cp/tp so their product is ", world_size, ", or launch with mpirun -np ", grid);
  const ModelConfig& m = c.model;
  if (m.n_head >= 1 && m.n_head % g.tp != 0)
    p.add("model.n_head=", m.n_head, " is not divisible by parallel.tp=", g.tp,
          "; tensor parallelism splits heads, so use a tp that divides n_head");
  if (m.n_kv_head >= 1 && m.n_kv_head % g.tp != 0 && g.tp % m.n_kv_head != 0)
    p.add("model.n_kv_head=", m.n_kv_head, " and parallel.tp=", g.tp,
          " do not divide one another; KV heads are split across tp ranks (or replicated when fewer), so "
          "use a tp that divides n_kv_head or is a multiple of it");
  const int T = c.data.seq_len;
  if (T < 1) return;
  const std::string layout = resolved_layout(c);
  const int ring = g.ring();
  if (layout == "zigzag" && T % (2 * ring) != 0) {
    if (g.cp_a2a == 1 || g.cp_a2a_auto())  // auto: ring() is cp, the largest ring it may pick
      p.add("data.seq_len=", T, " is not divisible by 2*cp=", 2 * g.cp, " required by parallel.layout=zigzag",
            g.layout == "auto" ? " (auto with cp > 1)" : "", "; use a multiple of ", 2 * g.cp,
            " or layout: contiguous");
    else
      p.add("data.seq_len=", T, " is not divisible by 2*ring=", 2 * ring, " (ring = cp/cp_a2a = ", g.cp, "/",
            g.cp_a2a, ") required by parallel.layout=zigzag", g.layout == "auto" ? " (auto with a ring > 1)" : "",
            "; use a multiple of ", 2 * ring, " or layout: contiguous");
  } else if (T % g.cp != 0) {
    p.add("data.seq_len=", T, " is not divisible by parallel.cp=", g.cp, " required by parallel.layout=", layout,
          "; use a multiple of ", g.cp);
  }
  if (c.train.batch_size >= 1 && c.train.batch_size % g.dp != 0)
    p.add("train.batch_size=", c.train.batch_size, " is not divisible by parallel.dp=", g.dp,
          "; each data-parallel replica takes batch_size/dp sequences, so use a multiple of ", g.dp);
}

void check_file_source(const Config& c, const char* key, const std::string& pattern, bool shards,
                       uint64_t* units, Problems& p) {
  *units = 0;
  if (pattern.empty()) {
    p.add(key, " is empty but data.source=", c.data.source, " reads a file; set ", key,
          shards ? " to an llm.c shard file or glob" : " to a text file");
    return;
  }
  if (!shards) {
    if (!is_regular_file(pattern, units))
      p.add(key, "='", pattern, "' does not exist or is not a file; fix the path (relative paths are taken "
            "from the working directory)");
    return;
  }
  std::vector<std::string> files = expand_data_paths(pattern);
  if (files.empty()) {
    p.add(key, "='", pattern, "' matches no file; fix the path or glob");
    return;
  }
  for (const std::string& f : files) {
    try {
      *units += read_shard_header(f);
    } catch (const Error& e) {
      p.add(key, ": ", e.what());
    }
  }
}

void check_data(const Config& c, Problems& p) {
  const DataConfig& d = c.data;
  const ModelConfig& m = c.model;
  p.one_of("data.source", d.source, {"copy", "bytes", "shards"});
  p.at_least("data.seq_len", d.seq_len, 2, " (a sequence needs at least one next-token target)");
  p.one_of("data.documents", d.documents, {"none", "eot"});
  p.one_of("data.positions", d.positions, {"global", "document"});
  const bool eot_negative = d.eot_token < -1;  // -1 is the documented "auto"; any other negative is no token
  if (eot_negative)
    p.add("data.eot_token=", d.eot_token, " is negative; set it to the token id that starts each document (>= 0, "
          "e.g. 50256 for GPT-2 shards), or leave it out (or -1) to take meta.json's eot_token beside the shards, "
          "else 50256");
  if (d.documents == "eot") {
    if (d.source == "copy")
      p.add("data.documents=eot: the copy task has no documents; use data.documents: none, or data.source: shards "
            "or bytes");
    const int eot = d.source == "copy" || eot_negative ? 0 : resolved_eot_token(c);
    if (eot < 0)
      p.add("data.documents=eot with data.source=", d.source, " needs data.eot_token (the token that starts each "
            "document, e.g. 10 for newline-separated bytes)");
    else if (eot >= m.vocab_size)
      p.add("data.eot_token=", eot, " is >= model.vocab_size=", m.vocab_size, "; set data.eot_token to the "
            "tokenizer's document delimiter (GPT-2: 50256; prepare_data.py shards: meta.json's eot_token) or raise "
            "model.vocab_size");
  } else if (d.positions == "document") {
    p.add("data.positions=document restarts positions at each document; set data.documents: eot, or use "
          "positions: global");
  }
  if (d.seq_len < 2) return;
  if (d.source == "copy") {
    if (m.vocab_size < 3)
      p.add("model.vocab_size=", m.vocab_size, " is too small for the copy task (span tokens plus a separator); "
            "use vocab_size >= 3");
    if (d.copy_span < 0) {
      p.add("data.copy_span=", d.copy_span, " must be >= 0 (0 = (seq_len-1)/2)");
    } else {
      const int span = copy_span_resolved(d.seq_len, d.copy_span);
      if (span < 1)
        p.add("data.seq_len=", d.seq_len, " is too short for the copy task; use seq_len >= 3");
      else if (2 * int64_t(span) + 1 > d.seq_len)
        p.add("data.copy_span=", span, " does not fit: a copy sample needs 2*copy_span+1 = ", 2 * int64_t(span) + 1,
              " tokens but data.seq_len=", d.seq_len, "; use copy_span <= ", (d.seq_len - 1) / 2, " or 0 (auto)");
    }
    return;
  }
  if (d.source != "bytes" && d.source != "shards") return;
  const bool shards = d.source == "shards";
  if (!shards && m.vocab_size < 256)
    p.add("model.vocab_size=", m.vocab_size, " is too small for data.source=bytes (byte tokens 0..255); "
          "use vocab_size >= 256");
  uint64_t train_units = 0, eval_units = 0;
  const size_t before = p.list().size();
  check_file_source(c, "data.path", d.path, shards, &train_units, p);
  if (!d.eval_path.empty()) check_file_source(c, "data.eval_path", d.eval_path, shards, &eval_units, p);
  if (p.list().size() != before) return;
  const char* unit = shards ? "tokens" : "bytes";
  if (d.eval_path.empty()) {
    eval_units = uint64_t(double(train_units) * kHeldOutFraction);
    train_units -= eval_units;
    if (train_units < uint64_t(d.seq_len) || eval_units < uint64_t(d.seq_len))
      p.add("data.path='", d.path, "' holds ", train_units + eval_units, " ", unit,
            "; the training part (90%) and the held-out tail (10%) each need at least data.seq_len=", d.seq_len,
            "; use more data, a shorter seq_len, or set data.eval_path");
  } else {
    if (train_units < uint64_t(d.seq_len))
      p.add("data.path='", d.path, "' holds ", train_units, " ", unit, ", fewer than data.seq_len=", d.seq_len,
            "; use more data or a shorter seq_len");
    if (eval_units < uint64_t(d.seq_len))
      p.add("data.eval_path='", d.eval_path, "' holds ", eval_units, " ", unit, ", fewer than data.seq_len=",
            d.seq_len, "; use more data or a shorter seq_len");
  }
}

// fp8.attention (kernels/attn_fp8.h): with train.precision fp8, head dims 64 and 128; on device: cuda only in the
// CUDA kernel's scope (fp8_attention_cuda_refusal). device: auto that resolves to a GPU is checked at start-up
// (framework/plan/resolve.cpp).
void check_fp8_attention(const Config& c, Problems& p) {
  if (!c.fp8.attention) return;
  if (c.train.precision != "fp8")
    p.add("fp8.attention=true runs the attention backward's products in FP8, but train.precision=", c.train.precision,
          "; set train.precision: fp8 (FP8 linear layers with it), or fp8.attention: false");
  const ModelConfig& m = c.model;
  const bool shape_set = c.is_explicit("model.d_model") || c.is_explicit("model.n_head");  // as check_model's
  if (shape_set && m.n_head >= 1 && m.d_model % m.n_head == 0 && m.head_dim() != 64 && m.head_dim() != 128)
    p.add("fp8.attention=true takes head dims 64 and 128 (the FP8 attention kernel's tiles), but head_dim = "
          "model.d_model / model.n_head = ", m.d_model, " / ", m.n_head, " = ", m.head_dim(), "; choose d_model / n_head "
          "= 64 or 128, or set fp8.attention: false");
  if (c.device == "cuda") {
    const std::string refusal = fp8_attention_cuda_refusal(c);
    if (!refusal.empty()) p.add(refusal);
  }
}

// fp8.attention_kv (kernels/kv_fp8_wire.h, RingAttention::set_kv_wire): e4m3 only with fp8.attention, and only where
// the ring's K/V hops are what moves K/V: the gather scheme (packed documents, parallel.cp_scheme gather or auto on a
// ring) and the all-to-all of parallel.cp_a2a move K/V in the activation dtype. A hybrid (1 < cp_a2a < cp) keeps its
// all-to-all in bf16 and sends E4M3 on its ring; cp_a2a = cp has no ring hop, so e4m3 would round for nothing.
void check_fp8_attention_kv(const Config& c, Problems& p) {
  const std::string& kv = c.fp8.attention_kv;
  p.one_of("fp8.attention_kv", kv, {"bf16", "e4m3"});
  if (kv != "e4m3") return;
  if (!c.fp8.attention) {
    p.add("fp8.attention_kv=e4m3 rounds K and V for the FP8 attention, but fp8.attention=false; set fp8.attention: "
          "true (with train.precision: fp8), or fp8.attention_kv: bf16");
    return;
  }
  const ParallelConfig& g = c.parallel;
  if (c.data.documents == "eot" && g.ring() > 1 && g.cp_scheme != CpSchemeSetting::ring)
    p.add("fp8.attention_kv=e4m3 sends K/V in E4M3 on the ring's hops only, but parallel.cp_scheme=",
          cp_scheme_setting_name(g.cp_scheme), " with data.documents: eot may run the gather scheme, which moves K/V "
          "rows in the activation dtype; set parallel.cp_scheme: ring, or fp8.attention_kv: bf16");
  if (g.cp > 1 && g.cp_a2a_auto())
    p.add("fp8.attention_kv=e4m3 sends K/V in E4M3 on the ring's hops only, and parallel.cp_a2a=auto may pick an "
          "all-to-all (which moves K/V in bf16) with no ring; set parallel.cp_a2a to a number, or "
          "fp8.attention_kv: bf16");
  else if (g.cp > 1 && g.cp_a2a == g.cp)
    p.add("fp8.attention_kv=e4m3 sends K/V in E4M3 on the ring's hops only, but parallel.cp_a2a=", g.cp_a2a,
          " = parallel.cp leaves no ring (the all-to-all moves K/V in bf16); use a cp_a2a below cp, or "
          "fp8.attention_kv: bf16");
}

void check_train(const Config& c, Problems& p) {
  const TrainConfig& t = c.train;
  p.at_least("train.batch_size", t.batch_size, 1);
  p.at_least("train.steps", t.steps, 1);
  p.at_least("train.eval_every", t.eval_every, 0, " (0 = never)");
  p.at_least("train.eval_batches", t.eval_batches, 0, " (0 = the whole held-out split)");
  p.at_least("train.lm_head_chunk", t.lm_head_chunk, 1);
  p.at_least("train.mlp_chunk", t.mlp_chunk, -1, " (-1 = auto, 0 = no chunking)");
  p.one_of("train.checkpointing", t.checkpointing, {"none", "full", "selective"});
  p.one_of("train.offload", t.offload, {"none", "activations"});
  if (t.offload_layers != "auto") {
    const std::string& v = t.offload_layers;
    const bool digits = !v.empty() && v.find_first_not_of("0123456789") == std::string::npos && v.size() < 6;
    if (!digits || std::stoi(v) > c.model.n_layer)
      p.add("train.offload_layers='", v, "' must be auto or a layer count from 0 to model.n_layer=", c.model.n_layer);
  }
  if (t.offload == "activations" && c.device == "cpu")
    p.add("train.offload=activations moves a GPU's block inputs to pinned host memory, but device=cpu keeps every "
          "activation in host memory already; use train.offload: none on the CPU (or device: cuda)");
  p.one_of("train.on_divergence", t.on_divergence, {"stop", "skip_step"});
  p.one_of("train.precision", t.precision, {"bf16", "fp8"});
  p.one_of("fp8.recipe", c.fp8.recipe, {"tensorwise", "rowwise", "block"});
  p.one_of("fp8.zero3_gather", c.fp8.zero3_gather, {"bf16", "fp8"});
  if (c.fp8.zero3_gather == "fp8") {
    // framework/model/zero_fp8_gather.h: the gather's codes are re-quantized bit for bit only by tensorwise weights.
    if (t.precision != "fp8")
      p.add("fp8.zero3_gather=fp8 gathers the weights that FP8 GEMMs read as E4M3, but train.precision=", t.precision,
            " runs bf16 GEMMs, which would read weights rounded to 3 mantissa bits; use fp8.zero3_gather: bf16, or "
            "train.precision: fp8");
    if (c.parallel.zero != 3)
      p.add("fp8.zero3_gather=fp8 halves the ZeRO-3 weight all-gather, but parallel.zero=", c.parallel.zero,
            " keeps full compute weights on every rank (nothing is gathered before use); use parallel.zero: 3, or "
            "fp8.zero3_gather: bf16");
    if (t.precision == "fp8" && c.fp8.recipe != "tensorwise")
      p.add("fp8.zero3_gather=fp8 sends each weight matrix as E4M3 with one factor per matrix, which the "
            "tensorwise recipe re-quantizes to the same codes; fp8.recipe=", c.fp8.recipe, " would quantize those "
            "already rounded weights again per ", c.fp8.recipe == "rowwise" ? "row" : "128x128 block",
            " (rows or blocks of small weights lose the precision the recipe is for); use fp8.recipe: tensorwise, or "
            "fp8.zero3_gather: bf16");
  }
  check_fp8_attention(c, p);
  check_fp8_attention_kv(c, p);
  if (t.precision == "fp8" && c.fp8.bf16_first_last && c.model.n_layer <= 2)
    p.add("fp8.bf16_first_last keeps the first and the last block in bf16, but model.n_layer=", c.model.n_layer,
          " leaves no block in fp8; use more layers, fp8.bf16_first_last: false, or train.precision: bf16");
  if (!(t.divergence_factor >= 0))
    p.add("train.divergence_factor=", t.divergence_factor, " must be >= 0 (0 = off; e.g. 4 flags a loss 4x its mean)");
  if (t.run_dir.empty()) p.add("train.run_dir is empty; set a directory for config.yaml, metrics and checkpoints");
}

void check_optim(const Config& c, Problems& p) {
  const OptimConfig& o = c.optim;
  if (!(o.lr >= 0)) p.add("optim.lr=", o.lr, " must be >= 0");
  if (!(o.min_lr >= 0)) p.add("optim.min_lr=", o.min_lr, " must be >= 0");
  if (o.min_lr > o.lr)
    p.add("optim.min_lr=", o.min_lr, " exceeds optim.lr=", o.lr, "; the schedule decays from lr to min_lr, so "
          "use min_lr <= lr");
  p.at_least("optim.warmup_steps", o.warmup_steps, 0);
  if (o.warmup_steps > c.train.steps)
    p.add("optim.warmup_steps=", o.warmup_steps, " exceeds train.steps=", c.train.steps,
          "; use warmup_steps <= steps");
  if (!(o.beta1 >= 0 && o.beta1 < 1)) p.add("optim.beta1=", o.beta1, " must be in [0, 1) (e.g. 0.9)");
  if (!(o.beta2 >= 0 && o.beta2 < 1)) p.add("optim.beta2=", o.beta2, " must be in [0, 1) (e.g. 0.95)");
  if (!(o.eps > 0)) p.add("optim.eps=", o.eps, " must be > 0 (e.g. 1e-8)");
  if (!(o.weight_decay >= 0)) p.add("optim.weight_decay=", o.weight_decay, " must be >= 0");
  if (!(o.grad_clip >= 0)) p.add("optim.grad_clip=", o.grad_clip, " must be >= 0 (0 = off)");
}

void check_checkpoint_and_log(const Config& c, Problems& p) {
  const CheckpointConfig& k = c.checkpoint;
  p.at_least("checkpoint.every", k.every, 0, " (0 = only at the end)");
  p.at_least("checkpoint.keep_last", k.keep_last, 1);
  if (!k.resume.empty() && k.resume != "auto" && !is_directory(k.resume))
    p.add("checkpoint.resume='", k.resume, "' is not a directory; use \"\" (fresh start), auto (latest in "
          "train.run_dir) or an existing run_dir/checkpoints/<lineage>/step_<N> directory");
  const LogConfig& l = c.log;
  p.at_least("log.every", l.every, 1);
  if (l.metrics_file.empty()) p.add("log.metrics_file is empty; set a file name such as metrics.jsonl");
  else if (leaves_directory(l.metrics_file))
    p.add("log.metrics_file='", l.metrics_file, "' leaves train.run_dir (an absolute path, or one with '..'), where it "
          "would move aside and overwrite another run's metrics; give a path inside the run directory, e.g. "
          "metrics.jsonl, and set train.run_dir to choose where the run writes");
  else if (const std::filesystem::path sub = std::filesystem::path(l.metrics_file).parent_path();
           !sub.empty() && !is_directory((std::filesystem::path(c.train.run_dir) / sub).string()))
    p.add("log.metrics_file='", l.metrics_file, "' is in the directory '", sub.string(), "' of train.run_dir, which "
          "does not exist (the run creates only train.run_dir itself); give a file name such as metrics.jsonl, or "
          "create ", (std::filesystem::path(c.train.run_dir) / sub).string(), " first");
  if (!(l.peak_tflops >= 0)) p.add("log.peak_tflops=", l.peak_tflops, " must be >= 0 (0 = from the GPU table)");
}

}  // namespace

void validate_config(const Config& config, int world_size) {
  Problems p;
  check_model(config, p);
  check_parallel(config, world_size, p);
  check_data(config, p);
  check_train(config, p);
  check_optim(config, p);
  check_checkpoint_and_log(config, p);
  const auto& list = p.list();
  if (list.empty()) return;
  const std::string origin = config.source_path.empty() ? "<config>" : config.source_path;
  if (list.size() == 1) throw Error(origin + ": " + list[0]);
  std::ostringstream os;
  os << list.size() << " problems in config " << origin << ":";
  for (const std::string& s : list) os << "\n  - " << s;
  throw Error(os.str());
}

}  // namespace rt
