// The cuDNN attention core (ssa/cudnn_attention.h): SDPA graphs of the cuDNN frontend (pinned by
// scripts/fetch_cudnn_frontend.sh), built once per shape and kept, their segment tables uploaded
// per call. S segments; s_q, s_kv the longest segment's query / key run, rounded up to a power of
// two so that packed batches share plans. libcudnn.so.9 is opened by dlopen (the frontend's
// dynamic loading), so a build with cuDNN runs where the library is missing.
#include "ssa/cudnn_attention.h"

#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <chrono>
#include <cmath>
#include <compare>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/copy.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/cuda_context.h"
#include "core/logging.h"
#include "core/tensor.h"

// The frontend's dynamic loading reads cuDNN's symbols from this handle (set by LibraryError).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend

namespace kelvin::ssa::cudnn_core {
namespace {

namespace fe = cudnn_frontend;
using TensorAttributes = std::shared_ptr<fe::graph::Tensor_attributes>;

constexpr size_t kMinimumVersion = 90600;  // max_total_seq_len bounds the backward's workspace
constexpr size_t kMaxCachedGraphs = 256;   // past it the cache starts again (packed batches)
constexpr int64_t kTableAlignment = 4;     // int32 per 16 bytes: each table part starts aligned

// Opens libcudnn.so.9 once; empty on success, else why it did not.
const std::string& LibraryError() {
  static const std::string error = [] {
    void* handle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) return absl::StrCat("libcudnn.so.9 did not load (", dlerror(), ")");
    fe::cudnn_dlhandle = handle;
    const size_t version = fe::detail::get_backend_version();
    if (version < kMinimumVersion) {
      return absl::StrCat("cuDNN ", version, " is loaded; the attention core needs ",
                          kMinimumVersion, " (9.6) or newer");
    }
    KLOG(INFO) << "cuDNN attention core: cuDNN " << version << " (compiled against "
               << fe::detail::get_compiled_version() << "), frontend " << CUDNN_FRONTEND_VERSION;
    return std::string();
  }();
  return error;
}

#define KELVIN_CUDNN_CHECK(call)                                                \
  do {                                                                          \
    const cudnnStatus_t kelvin_cudnn_status_ = (call);                          \
    if (kelvin_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                         \
      ::kelvin::internal::CheckFailure(__FILE__, __LINE__, #call).stream()      \
          << "returned " << fe::detail::get_error_string(kelvin_cudnn_status_); \
    }                                                                           \
  } while (0)

// The cuDNN handle of a device, made once, bound to the context's stream on every call.
cudnnHandle_t HandleFor(const Context& ctx) {
  static std::mutex mutex;
  static std::map<int, cudnnHandle_t> handles;
  std::lock_guard<std::mutex> lock(mutex);
  cudnnHandle_t& handle = handles[ctx.device().index];
  if (handle == nullptr) {
    KELVIN_CUDA_CHECK(cudaSetDevice(ctx.device().index));
    KELVIN_CUDNN_CHECK(fe::detail::create_handle(&handle));
  }
  KELVIN_CUDNN_CHECK(fe::detail::set_stream(handle, StreamOf(ctx)));
  return handle;
}

int64_t RoundUpToPowerOfTwo(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// What a plan depends on (the segment tables' values are bound per call).
struct GraphKey {
  bool backward = false;
  int64_t segments = 0, s_q = 0, s_kv = 0;
  int64_t query_tokens = 0, key_tokens = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool bottom_right = false;  // the causal diagonal aligned to each segment's last key

  auto operator<=>(const GraphKey&) const = default;
};

GraphKey KeyOf(bool backward, const AttentionSegments& s, const Tiles& t) {
  return {backward,
          s.count(),
          RoundUpToPowerOfTwo(s.max_query_length),
          RoundUpToPowerOfTwo(s.max_key_length),
          t.query_tokens,
          t.key_tokens,
          t.heads,
          t.kv_heads,
          t.head_dim,
          !s.square()};
}

// A built graph and the tensors bound when it runs; `error` non-empty when cuDNN built no plan.
struct BuiltGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  TensorAttributes q, k, v, out, lse, dout, dq, dk, dv;
  TensorAttributes seq_len_q, seq_len_kv, q_offsets, kv_offsets, lse_offsets;
  int64_t workspace_bytes = 0;
  std::string error;
};

// The segment tables of one call, one int32 array on the device: seq_len_q [S], seq_len_kv [S],
// then element offsets [S + 1] of the query-side vectors (q, out, dout, dq), the key-side ones
// (k, v, dk, dv) and the lse rows; each part starts 16-byte aligned.
struct SegmentTables {
  Tensor device;  // [5 parts] i32
  int64_t seq_len_q = 0, seq_len_kv = 0, q_offsets = 0, kv_offsets = 0, lse_offsets = 0;

  int32_t* at(int64_t part) const { return device.data<int32_t>() + part; }
};

int64_t Aligned(int64_t n) { return (n + kTableAlignment - 1) / kTableAlignment * kTableAlignment; }

SegmentTables UploadTables(const Context& ctx, const AttentionSegments& s, const Tiles& t) {
  const int64_t count = s.count();
  SegmentTables tables;
  tables.seq_len_q = 0;
  tables.seq_len_kv = Aligned(count);
  tables.q_offsets = tables.seq_len_kv + Aligned(count);
  tables.kv_offsets = tables.q_offsets + Aligned(count + 1);
  tables.lse_offsets = tables.kv_offsets + Aligned(count + 1);
  Tensor host = Tensor::ZerosCpu({tables.lse_offsets + Aligned(count + 1)}, DType::kI32);
  int32_t* h = host.data<int32_t>();
  const int64_t q_vector = t.heads * t.head_dim, kv_vector = t.kv_heads * t.head_dim;
  for (int64_t i = 0; i < count; ++i) {
    h[tables.seq_len_q + i] = s.query_lengths[i];
    h[tables.seq_len_kv + i] = s.key_lengths[i];
    h[tables.q_offsets + i] = static_cast<int32_t>(s.query_starts[i] * q_vector);
    h[tables.kv_offsets + i] = static_cast<int32_t>(s.key_starts[i] * kv_vector);
    h[tables.lse_offsets + i] = static_cast<int32_t>(s.query_starts[i] * t.heads);
  }
  const int64_t query_end = s.query_starts[count - 1] + s.query_lengths[count - 1];
  const int64_t key_end = s.key_starts[count - 1] + s.key_lengths[count - 1];
  h[tables.q_offsets + count] = static_cast<int32_t>(query_end * q_vector);
  h[tables.kv_offsets + count] = static_cast<int32_t>(key_end * kv_vector);
  h[tables.lse_offsets + count] = static_cast<int32_t>(query_end * t.heads);
  tables.device = CopyToDevice(ctx, host, ctx.device());
  return tables;
}

// The graph's inputs every SDPA graph of this core shares: q~, k~, v~ in the ragged layout
// ([S, heads, s, d] with per-segment element offsets into the token-major tensors), the segment
// lengths and the offset tables.
void DeclareInputs(fe::graph::Graph& graph, const GraphKey& key, BuiltGraph& built) {
  auto index_tensor = [&](const char* name, int64_t rows) {
    return graph.tensor(fe::graph::Tensor_attributes()
                            .set_name(name)
                            .set_dim({rows, 1, 1, 1})
                            .set_stride({1, 1, 1, 1})
                            .set_data_type(fe::DataType_t::INT32));
  };
  built.seq_len_q = index_tensor("seq_len_q", key.segments);
  built.seq_len_kv = index_tensor("seq_len_kv", key.segments);
  built.q_offsets = index_tensor("q_offsets", key.segments + 1);
  built.kv_offsets = index_tensor("kv_offsets", key.segments + 1);
  built.lse_offsets = index_tensor("lse_offsets", key.segments + 1);
  auto tokens = [&](const char* name, int64_t heads, int64_t s, const TensorAttributes& offsets) {
    return graph.tensor(
        fe::graph::Tensor_attributes()
            .set_name(name)
            .set_dim({key.segments, heads, s, key.head_dim})
            .set_stride({s * heads * key.head_dim, key.head_dim, heads * key.head_dim, 1})
            .set_ragged_offset(offsets));
  };
  built.q = tokens("q", key.heads, key.s_q, built.q_offsets);
  built.k = tokens("k", key.kv_heads, key.s_kv, built.kv_offsets);
  built.v = tokens("v", key.kv_heads, key.s_kv, built.kv_offsets);
}

// Marks an SDPA output as the token-major tensor of `heads` x `width` values per token.
void DeclareOutput(const TensorAttributes& t, const GraphKey& key, int64_t heads, int64_t s,
                   int64_t width, const TensorAttributes& offsets) {
  t->set_output(true)
      .set_dim({key.segments, heads, s, width})
      .set_stride({s * heads * width, width, heads * width, 1})
      .set_ragged_offset(offsets);
}

template <typename Attributes>
Attributes& MaskAndLengths(Attributes& a, const GraphKey& key, const BuiltGraph& built) {
  a.set_attn_scale(1.0f / std::sqrt(static_cast<float>(key.head_dim)))
      .set_padding_mask(true)
      .set_seq_len_q(built.seq_len_q)
      .set_seq_len_kv(built.seq_len_kv)
      .set_max_total_seq_len_q(key.query_tokens)
      .set_max_total_seq_len_kv(key.key_tokens);
  if (key.bottom_right) {
    a.set_causal_mask_bottom_right(true);
  } else {
    a.set_causal_mask(true);
  }
  return a;
}

// The forward or backward SDPA graph of `key` and its tensors, in `built`.
void Declare(const GraphKey& key, BuiltGraph& built) {
  built.graph = std::make_shared<fe::graph::Graph>();
  fe::graph::Graph& graph = *built.graph;
  graph.set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  DeclareInputs(graph, key, built);
  const int64_t h = key.heads, g = key.kv_heads, d = key.head_dim;
  if (!key.backward) {
    fe::graph::SDPA_attributes attributes;
    attributes.set_name("ssa_core_forward").set_generate_stats(true);
    auto [out, lse] = graph.sdpa(built.q, built.k, built.v, MaskAndLengths(attributes, key, built));
    built.out = out;
    built.lse = lse;
    DeclareOutput(built.out, key, h, key.s_q, d, built.q_offsets);
    DeclareOutput(built.lse, key, h, key.s_q, 1, built.lse_offsets);
    built.lse->set_data_type(fe::DataType_t::FLOAT);
    return;
  }
  auto query_side = [&](const char* name, int64_t width, const TensorAttributes& offsets) {
    return graph.tensor(fe::graph::Tensor_attributes()
                            .set_name(name)
                            .set_dim({key.segments, h, key.s_q, width})
                            .set_stride({key.s_q * h * width, width, h * width, 1})
                            .set_ragged_offset(offsets));
  };
  built.out = query_side("out", d, built.q_offsets);
  built.dout = query_side("dout", d, built.q_offsets);
  built.lse = query_side("lse", 1, built.lse_offsets);
  built.lse->set_data_type(fe::DataType_t::FLOAT);
  fe::graph::SDPA_backward_attributes attributes;
  attributes.set_name("ssa_core_backward");
  auto [dq, dk, dv] = graph.sdpa_backward(built.q, built.k, built.v, built.out, built.dout,
                                          built.lse, MaskAndLengths(attributes, key, built));
  built.dq = dq;
  built.dk = dk;
  built.dv = dv;
  DeclareOutput(built.dq, key, h, key.s_q, d, built.q_offsets);
  DeclareOutput(built.dk, key, g, key.s_kv, d, built.kv_offsets);
  DeclareOutput(built.dv, key, g, key.s_kv, d, built.kv_offsets);
}

std::unique_ptr<BuiltGraph> Build(cudnnHandle_t handle, const GraphKey& key) {
  auto built = std::make_unique<BuiltGraph>();
  try {  // the frontend throws where a symbol or library is missing
    Declare(key, *built);
    fe::error_t status = built->graph->build(handle, {fe::HeurMode_t::A});
    if (status.is_bad()) {
      built->error = status.get_message();
      return built;
    }
    int64_t workspace = 0;
    fe::error_t sized = built->graph->get_workspace_size(workspace);
    if (sized.is_bad()) {
      built->error = sized.get_message();
      return built;
    }
    built->workspace_bytes = workspace;
  } catch (const std::exception& e) {
    built->error = e.what();
  }
  return built;
}

// The graph of `key`, built at its first use and kept.
const BuiltGraph& GraphFor(const Context& ctx, const GraphKey& key) {
  static std::mutex mutex;
  static std::map<GraphKey, std::unique_ptr<BuiltGraph>> graphs;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = graphs.find(key);
  if (it != graphs.end()) return *it->second;
  if (graphs.size() >= kMaxCachedGraphs) graphs.clear();
  const auto start = std::chrono::steady_clock::now();
  std::unique_ptr<BuiltGraph> built = Build(HandleFor(ctx), key);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  KLOG(INFO) << "cuDNN attention core: " << (key.backward ? "backward" : "forward") << " plan for "
             << key.segments << " segments (s_q " << key.s_q << ", s_kv " << key.s_kv << ", "
             << key.query_tokens << " / " << key.key_tokens << " tokens, H " << key.heads << ", G "
             << key.kv_heads << ", d " << key.head_dim
             << (key.bottom_right ? ", bottom-right causal" : ", causal") << "): "
             << (built->error.empty() ? absl::StrCat("workspace ", built->workspace_bytes, " bytes")
                                      : absl::StrCat("not supported (", built->error, ")"))
             << ", " << static_cast<int64_t>(ms) << " ms";
  return *graphs.emplace(key, std::move(built)).first->second;
}

// Element offsets must fit cuDNN's int32 offset tables.
absl::Status CheckOffsetsFit(const Tiles& t) {
  const int64_t q_elements = t.query_tokens * t.heads * t.head_dim;
  const int64_t kv_elements = t.key_tokens * t.kv_heads * t.head_dim;
  if (q_elements >= INT32_MAX || kv_elements >= INT32_MAX) {
    return absl::UnimplementedError(
        absl::StrCat("the call's ", q_elements, " query / ", kv_elements,
                     " key elements overflow cuDNN's int32 ragged offsets"));
  }
  return absl::OkStatus();
}

void* Mutable(const void* p) { return const_cast<void*>(p); }

void Execute(const Context& ctx, const BuiltGraph& built,
             std::unordered_map<TensorAttributes, void*>& pack, const SegmentTables& tables) {
  pack[built.seq_len_q] = tables.at(tables.seq_len_q);
  pack[built.seq_len_kv] = tables.at(tables.seq_len_kv);
  pack[built.q_offsets] = tables.at(tables.q_offsets);
  pack[built.kv_offsets] = tables.at(tables.kv_offsets);
  pack[built.lse_offsets] = tables.at(tables.lse_offsets);
  // [workspace_bytes] scratch, back to the allocator's cache (same stream) when this returns.
  Tensor workspace = Tensor::Empty({(built.workspace_bytes + 3) / 4}, DType::kI32, ctx.device());
  fe::error_t status = built.graph->execute(
      HandleFor(ctx), pack, built.workspace_bytes > 0 ? workspace.raw_data() : nullptr);
  KELVIN_CHECK(status.is_good()) << "cuDNN attention core: a built plan failed to run: "
                                 << status.get_message();
}

}  // namespace

std::string UnavailableReason(const Context& ctx) {
  if (!ctx.is_cuda()) return "the context is not a CUDA device";
  if (!LibraryError().empty()) return LibraryError();
  int major = 0;
  KELVIN_CUDA_CHECK(
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, ctx.device().index));
  if (major < 9) {
    return absl::StrCat("the device has compute capability ", major,
                        ".x; the core's ragged layout needs Hopper (9.0) or newer");
  }
  return std::string();
}

absl::Status Forward(const Context& ctx, const AttentionSegments& segments, const Tiles& tiles,
                     bf16* out, float* lse) {
  if (absl::Status fits = CheckOffsetsFit(tiles); !fits.ok()) return fits;
  const BuiltGraph& built = GraphFor(ctx, KeyOf(false, segments, tiles));
  if (!built.error.empty()) return absl::UnimplementedError(built.error);
  const SegmentTables tables = UploadTables(ctx, segments, tiles);
  std::unordered_map<TensorAttributes, void*> pack = {{built.q, Mutable(tiles.q)},
                                                      {built.k, Mutable(tiles.k)},
                                                      {built.v, Mutable(tiles.v)},
                                                      {built.out, out},
                                                      {built.lse, lse}};
  Execute(ctx, built, pack, tables);
  return absl::OkStatus();
}

absl::Status Backward(const Context& ctx, const AttentionSegments& segments, const Tiles& tiles,
                      const bf16* out, const float* lse, const bf16* dout, bf16* dq, bf16* dk,
                      bf16* dv) {
  if (absl::Status fits = CheckOffsetsFit(tiles); !fits.ok()) return fits;
  const BuiltGraph& built = GraphFor(ctx, KeyOf(true, segments, tiles));
  if (!built.error.empty()) return absl::UnimplementedError(built.error);
  const SegmentTables tables = UploadTables(ctx, segments, tiles);
  std::unordered_map<TensorAttributes, void*> pack = {{built.q, Mutable(tiles.q)},
                                                      {built.k, Mutable(tiles.k)},
                                                      {built.v, Mutable(tiles.v)},
                                                      {built.out, Mutable(out)},
                                                      {built.lse, Mutable(lse)},
                                                      {built.dout, Mutable(dout)},
                                                      {built.dq, dq},
                                                      {built.dk, dk},
                                                      {built.dv, dv}};
  Execute(ctx, built, pack, tables);
  return absl::OkStatus();
}

}  // namespace kelvin::ssa::cudnn_core
