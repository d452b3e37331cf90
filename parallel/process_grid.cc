// Layout validation and the construction of the grid's communicators (one MPI_Comm_split each).
#include "parallel/process_grid.h"

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/mpi_check.h"
#include "core/status.h"
#include "parallel/comm/communicator_factory.h"
#include "parallel/comm/self_communicator.h"

namespace kelvin::parallel {
namespace {

std::optional<int64_t> CheckedProduct(std::initializer_list<int64_t> factors) {
  int64_t product = 1;
  for (const int64_t factor : factors) {
    if (__builtin_mul_overflow(product, factor, &product)) return std::nullopt;
  }
  return product;
}

std::string ProductText(std::optional<int64_t> product) {
  return product.has_value() ? absl::StrCat(*product) : "(overflows int64)";
}

// The communicator over `comm`'s members: a group of one process is a SelfCommunicator whatever
// the backend, so that every collective of a size-1 group is an identity (no host staging, no
// NCCL communicator) and callers never test size() == 1 to skip one.
absl::StatusOr<std::unique_ptr<Communicator>> GroupOver(CommBackend backend, MPI_Comm comm,
                                                        std::string_view role,
                                                        const CommunicatorOptions& options,
                                                        const Context& ctx) {
  const std::vector<int> members = WorldRanksOf(comm);
  if (members.size() == 1) {
    return std::make_unique<SelfCommunicator>(std::string(role), members.front(), ctx);
  }
  return CreateCommunicator(backend, comm, role, options, ctx);
}

// The communicator over the ranks of `world` that share `color`, ordered by `key`; nullptr for
// ranks passing MPI_UNDEFINED.
absl::StatusOr<std::unique_ptr<Communicator>> SplitGroup(MPI_Comm world, int color, int key,
                                                         std::string_view role, CommBackend backend,
                                                         const CommunicatorOptions& options,
                                                         const Context& ctx) {
  MPI_Comm group = MPI_COMM_NULL;
  KELVIN_MPI_CHECK(MPI_Comm_split(world, color, key, &group));
  if (group == MPI_COMM_NULL) return std::unique_ptr<Communicator>();
  absl::StatusOr<std::unique_ptr<Communicator>> communicator =
      GroupOver(backend, group, role, options, ctx);
  KELVIN_MPI_CHECK(MPI_Comm_free(&group));
  return communicator;
}

}  // namespace

absl::Status ValidateGridSpec(const GridSpec& spec) {
  std::vector<std::string> problems;
  const std::pair<const char*, int64_t> counts[] = {
      {"world_size", spec.world_size},
      {"tensor_parallel", spec.tensor_parallel},
      {"context_parallel", spec.context_parallel},
      {"data_parallel", spec.data_parallel},
      {"pipeline_parallel", spec.pipeline_parallel},
      {"virtual_pipeline_stages", spec.virtual_pipeline_stages},
      {"num_attention_heads", spec.num_attention_heads},
      {"num_key_value_heads", spec.num_key_value_heads},
      {"num_layers", spec.num_layers},
      {"seq_length", spec.seq_length},
      {"micro_batch_size", spec.micro_batch_size},
      {"gradient_accumulation_steps", spec.gradient_accumulation_steps},
      {"global_batch_size", spec.global_batch_size},
  };
  for (const auto& [name, value] : counts) {
    if (value < 1) problems.push_back(absl::StrCat(name, "=", value, ": must be >= 1"));
  }
  if (!problems.empty()) {  // the divisibility rules below assume positive counts
    return absl::InvalidArgumentError(
        problems.size() == 1 ? absl::StrCat("invalid parallel layout: ", problems[0])
                             : absl::StrCat("invalid parallel layout (", problems.size(),
                                            " problems):\n  ", absl::StrJoin(problems, "\n  ")));
  }

  const int64_t tp = spec.tensor_parallel, cp = spec.context_parallel, dp = spec.data_parallel,
                pp = spec.pipeline_parallel, vpp = spec.virtual_pipeline_stages;
  const std::optional<int64_t> grid = CheckedProduct({tp, cp, dp, pp});
  if (grid != spec.world_size) {
    problems.push_back(absl::StrCat(
        "world size ", spec.world_size, " does not equal tp ", tp, " x cp ", cp, " x dp ", dp,
        " x pp ", pp, " = ", ProductText(grid), ": launch ", ProductText(grid),
        " processes, or change parallel.tensor_parallel/context_parallel/data_parallel/"
        "pipeline_parallel (data_parallel 0 derives it from the world size)"));
  }
  if (spec.num_attention_heads % tp != 0) {
    problems.push_back(absl::StrCat("num_attention_heads=", spec.num_attention_heads,
                                    " is not divisible by tensor_parallel=", tp,
                                    ": each tensor-parallel rank owns H / TP query heads"));
  }
  const int64_t kv_heads = spec.num_key_value_heads;
  if (kv_heads % tp != 0 && tp % kv_heads != 0) {
    problems.push_back(absl::StrCat(
        "num_key_value_heads=", kv_heads, " is neither divisible by tensor_parallel=", tp,
        " nor a divisor of it: KV heads are split across tensor-parallel ranks, or replicated "
        "when tensor_parallel is a multiple of them"));
  }
  const std::optional<int64_t> chunks = CheckedProduct({pp, vpp});
  if (!chunks.has_value() || spec.num_layers % *chunks != 0) {
    problems.push_back(absl::StrCat("num_layers=", spec.num_layers,
                                    " is not divisible by pipeline_parallel ", pp,
                                    " x virtual_pipeline_stages ", vpp, " = ", ProductText(chunks),
                                    ": every model chunk holds the same number of layers"));
  }
  if (cp > 1 && spec.seq_length % (2 * cp) != 0) {
    problems.push_back(absl::StrCat(
        "seq_length=", spec.seq_length, " is not divisible by 2 x context_parallel = ", 2 * cp,
        " (context parallelism splits each sequence into 2 x context_parallel chunks)"));
  } else if (spec.sequence_parallel && (spec.seq_length / cp) % tp != 0) {
    problems.push_back(absl::StrCat("seq_length=", spec.seq_length, " / context_parallel=", cp,
                                    " is not divisible by tensor_parallel=", tp,
                                    " for sequence_parallel (each rank keeps 1 / TP of the "
                                    "tokens in the norm regions)"));
  }
  const std::optional<int64_t> batch =
      CheckedProduct({spec.micro_batch_size, spec.gradient_accumulation_steps, dp});
  if (batch != spec.global_batch_size) {
    problems.push_back(absl::StrCat(
        "global_batch_size=", spec.global_batch_size, " does not equal micro_batch_size ",
        spec.micro_batch_size, " x gradient_accumulation_steps ", spec.gradient_accumulation_steps,
        " x data_parallel ", dp, " = ", ProductText(batch)));
  }
  if (problems.empty()) return absl::OkStatus();
  if (problems.size() == 1) {
    return absl::InvalidArgumentError(absl::StrCat("invalid parallel layout: ", problems[0]));
  }
  return absl::InvalidArgumentError(absl::StrCat("invalid parallel layout (", problems.size(),
                                                 " problems):\n  ",
                                                 absl::StrJoin(problems, "\n  ")));
}

GridCoordinates CoordinatesOf(int world_rank, const GridSpec& spec) {
  KELVIN_CHECK(world_rank >= 0 && world_rank < spec.world_size)
      << "world rank " << world_rank << " of " << spec.world_size;
  GridCoordinates c;
  c.tp = world_rank % spec.tensor_parallel;
  int rest = world_rank / spec.tensor_parallel;
  c.cp = rest % spec.context_parallel;
  rest /= spec.context_parallel;
  c.dp = rest % spec.data_parallel;
  c.pp = rest / spec.data_parallel;
  return c;
}

int WorldRankOf(const GridCoordinates& c, const GridSpec& spec) {
  return c.tp +
         spec.tensor_parallel * (c.cp + spec.context_parallel * (c.dp + spec.data_parallel * c.pp));
}

absl::StatusOr<std::unique_ptr<ProcessGrid>> ProcessGrid::Create(const GridSpec& spec,
                                                                 MPI_Comm world,
                                                                 CommBackend backend,
                                                                 const CommunicatorOptions& options,
                                                                 const Context& ctx) {
  int world_size = 0, world_rank = 0;
  KELVIN_MPI_CHECK(MPI_Comm_size(world, &world_size));
  KELVIN_MPI_CHECK(MPI_Comm_rank(world, &world_rank));
  if (spec.world_size != world_size) {
    return absl::InvalidArgumentError(absl::StrCat("process grid: the layout is for world size ",
                                                   spec.world_size, ", but the MPI world has ",
                                                   world_size, " processes"));
  }
  KELVIN_RETURN_IF_ERROR(ValidateGridSpec(spec));
  int global_rank = 0;
  KELVIN_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &global_rank));
  SetLogRank(global_rank);

  auto grid = std::unique_ptr<ProcessGrid>(new ProcessGrid());
  grid->spec_ = spec;
  grid->world_rank_ = world_rank;
  const GridCoordinates c = CoordinatesOf(world_rank, spec);
  grid->coordinates_ = c;
  KELVIN_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> world_group,
                          GroupOver(backend, world, "world", options, ctx));
  grid->world_ = std::make_unique<TimedCommunicator>("world", std::move(world_group));
  // Every rank is here before the (blocking) splits; a missing one times out in this barrier.
  grid->world_->Barrier();

  const int TP = spec.tensor_parallel, CP = spec.context_parallel, DP = spec.data_parallel;
  struct GroupRule {
    std::unique_ptr<TimedCommunicator>* target;
    const char* role;
    int color;  // the coordinates the members share
    int key;    // the member's place in the group
  };
  const bool embedding_stage = grid->is_first_stage() || grid->is_last_stage();
  const GroupRule rules[] = {
      {&grid->tp_, "tp", c.cp + CP * (c.dp + DP * c.pp), c.tp},
      {&grid->cp_, "cp", c.tp + TP * (c.dp + DP * c.pp), c.cp},
      {&grid->dp_, "dp", c.tp + TP * (c.cp + CP * c.pp), c.dp},
      {&grid->pp_, "pp", c.tp + TP * (c.cp + CP * c.dp), c.pp},
      {&grid->dp_cp_, "dp_cp", c.tp + TP * c.pp, c.cp + CP * c.dp},
      {&grid->embedding_, "embedding",
       embedding_stage ? c.tp + TP * (c.cp + CP * c.dp) : MPI_UNDEFINED, c.pp},
  };
  for (const GroupRule& rule : rules) {
    KELVIN_ASSIGN_OR_RETURN(
        std::unique_ptr<Communicator> group,
        SplitGroup(world, rule.color, rule.key, rule.role, backend, options, ctx));
    if (group != nullptr) {
      *rule.target = std::make_unique<TimedCommunicator>(rule.role, std::move(group));
    }
  }
  return grid;
}

absl::StatusOr<std::unique_ptr<ProcessGrid>> ProcessGrid::Single(const GridSpec& spec,
                                                                 const Context& ctx) {
  if (spec.world_size != 1) {
    return absl::InvalidArgumentError(absl::StrCat("process grid: the layout is for world size ",
                                                   spec.world_size, ", but this is one process"));
  }
  KELVIN_RETURN_IF_ERROR(ValidateGridSpec(spec));
  auto grid = std::unique_ptr<ProcessGrid>(new ProcessGrid());
  grid->spec_ = spec;
  for (const auto& [target, role] : {std::pair{&grid->world_, "world"},
                                     {&grid->tp_, "tp"},
                                     {&grid->cp_, "cp"},
                                     {&grid->dp_, "dp"},
                                     {&grid->pp_, "pp"},
                                     {&grid->dp_cp_, "dp_cp"},
                                     {&grid->embedding_, "embedding"}}) {
    *target = std::make_unique<TimedCommunicator>(
        role, std::make_unique<SelfCommunicator>(role, /*world_rank=*/0, ctx));
  }
  return grid;
}

double ProcessGrid::CommunicationSeconds() const {
  double seconds = 0;
  for (const auto* group : {&world_, &tp_, &cp_, &dp_, &pp_, &dp_cp_, &embedding_}) {
    if (*group != nullptr) seconds += (*group)->seconds();
  }
  return seconds;
}

}  // namespace kelvin::parallel
