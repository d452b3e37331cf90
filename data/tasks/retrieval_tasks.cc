// The multi-key, multi-value and variable-tracking samples and their scoring (see
// retrieval_tasks.h).
#include "data/tasks/retrieval_tasks.h"

#include <algorithm>
#include <cctype>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "data/sampling/random.h"
#include "data/tasks/haystack.h"

namespace kelvin::data {
namespace {

constexpr int kNeedles = 4;     // keys (multi-key), values (multi-value), chain links
constexpr int kDecoyLinks = 2;  // the variable-tracking decoy chain's assignments
constexpr int kVariableLetters = 5;

// Names of two 5-letter words: every name has 11 bytes.
constexpr const char* kAdjectives[] = {"amber", "brisk", "dusty", "eager", "faint", "giant",
                                       "happy", "jolly", "lucky", "misty", "noble", "olive",
                                       "proud", "quiet", "rapid", "sunny"};
constexpr const char* kNouns[] = {"badge", "cabin", "delta", "eagle", "flame", "grape",
                                  "heron", "ivory", "jewel", "kayak", "lemon", "maple",
                                  "otter", "pearl", "river", "tiger"};

std::string DrawName(std::mt19937_64& rng) {
  return absl::StrCat(kAdjectives[UniformBelow(rng, std::size(kAdjectives))], "-",
                      kNouns[UniformBelow(rng, std::size(kNouns))]);
}

std::string DrawVariable(std::mt19937_64& rng) {
  std::string name;
  for (int i = 0; i < kVariableLetters; ++i) name.push_back('A' + UniformBelow(rng, 26));
  return name;
}

// `count` draws of `draw` different from each other.
template <typename Draw>
auto DrawDistinct(std::mt19937_64& rng, int count, Draw draw) {
  std::vector<decltype(draw(rng))> values;
  while (static_cast<int>(values.size()) < count) {
    auto value = draw(rng);
    if (std::find(values.begin(), values.end(), value) == values.end()) values.push_back(value);
  }
  return values;
}

// A sentence hidden at a filler boundary; at one boundary they keep the order they were added in.
struct Needle {
  int64_t boundary;
  std::string text;
};

// The filler of `boundaries` with `needles` at their boundaries, then `question`.
std::string Assemble(const std::vector<int64_t>& boundaries, std::vector<Needle> needles,
                     const std::string& question) {
  std::stable_sort(needles.begin(), needles.end(),
                   [](const Needle& a, const Needle& b) { return a.boundary < b.boundary; });
  std::string prompt;
  int64_t filler_at = 0;
  for (const Needle& needle : needles) {
    absl::StrAppend(&prompt, FillerText(filler_at, needle.boundary), needle.text);
    filler_at = needle.boundary;
  }
  absl::StrAppend(&prompt, FillerText(filler_at, boundaries.back()), question);
  return prompt;
}

std::string NumberSentence(const std::string& name, int32_t number) {
  return absl::StrCat("The special number for ", name, " is ", number, ". ");
}

// Boundaries drawn uniformly from those at or after `from` (the chain's later links), in order.
std::vector<int64_t> DrawLaterBoundaries(std::mt19937_64& rng,
                                         const std::vector<int64_t>& boundaries, int64_t from,
                                         int count) {
  const auto first = std::lower_bound(boundaries.begin(), boundaries.end(), from);
  const auto choices = static_cast<uint64_t>(boundaries.end() - first);
  std::vector<int64_t> drawn;
  for (int i = 0; i < count; ++i) drawn.push_back(*(first + UniformBelow(rng, choices)));
  std::sort(drawn.begin(), drawn.end());
  return drawn;
}

}  // namespace

std::string_view RetrievalTaskName(RetrievalTask task) {
  switch (task) {
    case RetrievalTask::kPasskey:
      return "passkey";
    case RetrievalTask::kMultiKey:
      return "multikey";
    case RetrievalTask::kMultiValue:
      return "multivalue";
    case RetrievalTask::kVariableTracking:
      return "vartrack";
  }
  return "?";
}

absl::StatusOr<RetrievalTask> ParseRetrievalTask(std::string_view name) {
  for (const RetrievalTask task : {RetrievalTask::kPasskey, RetrievalTask::kMultiKey,
                                   RetrievalTask::kMultiValue, RetrievalTask::kVariableTracking}) {
    if (name == RetrievalTaskName(task)) return task;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown retrieval task \"", std::string(name),
                   "\": the tasks are passkey, multikey, multivalue and vartrack"));
}

RetrievalSample MakeRetrievalSample(RetrievalTask task, uint64_t seed, int64_t index,
                                    int64_t filler_budget, double depth) {
  KELVIN_CHECK(task != RetrievalTask::kPasskey) << "passkey samples are the passkey task's";
  KELVIN_CHECK_GE(filler_budget, 0);
  KELVIN_CHECK_GE(index, 0);
  std::mt19937_64 rng(MixSeed(seed, static_cast<uint64_t>(index)));
  const std::vector<int64_t> boundaries = FillerBoundaries(filler_budget);
  const int64_t asked_at = DrawBoundary(rng, boundaries, {depth, depth});
  RetrievalSample sample;
  sample.depth = boundaries.back() > 0 ? static_cast<double>(asked_at) / boundaries.back() : 0.0;
  std::vector<Needle> needles;
  std::string question;
  const auto anywhere = [&] { return boundaries[UniformBelow(rng, boundaries.size())]; };
  switch (task) {
    case RetrievalTask::kMultiKey: {
      const std::vector<std::string> names = DrawDistinct(rng, kNeedles, DrawName);
      for (int i = 0; i < kNeedles; ++i) {
        const int32_t number = DrawFiveDigits(rng);
        needles.push_back({i == 0 ? asked_at : anywhere(), NumberSentence(names[i], number)});
        if (i == 0) sample.answers.push_back(absl::StrCat(number));
      }
      question = absl::StrCat("What is the special number for ", names[0],
                              "? The special number for ", names[0], " is ");
      break;
    }
    case RetrievalTask::kMultiValue: {
      const std::string name = DrawName(rng);
      const std::vector<int32_t> numbers = DrawDistinct(rng, kNeedles, DrawFiveDigits);
      for (int i = 0; i < kNeedles; ++i) {
        needles.push_back({i == 0 ? asked_at : anywhere(), NumberSentence(name, numbers[i])});
        sample.answers.push_back(absl::StrCat(numbers[i]));
      }
      question = absl::StrCat("What are all the special numbers for ", name,
                              "? The special numbers for ", name, " are ");
      break;
    }
    case RetrievalTask::kVariableTracking: {
      const std::vector<std::string> names =
          DrawDistinct(rng, kNeedles + kDecoyLinks, DrawVariable);
      const std::vector<int32_t> values = DrawDistinct(rng, 2, DrawFiveDigits);
      // The chain from the asked value, its links in order after the first; then the decoy's.
      std::vector<int64_t> at = DrawLaterBoundaries(rng, boundaries, asked_at, kNeedles - 1);
      at.insert(at.begin(), asked_at);
      const std::vector<int64_t> decoy_at = DrawLaterBoundaries(rng, boundaries, 0, kDecoyLinks);
      const auto chain = [&](int first, int links, int32_t value,
                             const std::vector<int64_t>& where) {
        for (int i = 0; i < links; ++i) {
          const std::string source = i == 0 ? absl::StrCat(value) : "VAR " + names[first + i - 1];
          needles.push_back(
              {where[i], absl::StrCat("VAR ", names[first + i], " = ", source, ". ")});
        }
      };
      chain(0, kNeedles, values[0], at);
      chain(kNeedles, kDecoyLinks, values[1], decoy_at);
      sample.answers.assign(names.begin(), names.begin() + kNeedles);
      question = absl::StrCat("Which variables hold the value ", values[0],
                              "? The variables that hold ", values[0], " are ");
      break;
    }
    case RetrievalTask::kPasskey:
      break;
  }
  sample.prompt = Assemble(boundaries, std::move(needles), question);
  return sample;
}

int64_t RetrievalAnswerBytes(RetrievalTask task) {
  const int64_t each = task == RetrievalTask::kVariableTracking ? kVariableLetters : 5;
  const int64_t count =
      task == RetrievalTask::kMultiKey || task == RetrievalTask::kPasskey ? 1 : kNeedles;
  return count * each + (count - 1) * 2 + 1;  // ", " between them, a full stop
}

double ScoreRetrievalAnswer(std::string_view generated, const std::vector<std::string>& answers) {
  if (answers.empty()) return 0;
  const auto word_character = [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0;
  };
  int found = 0;
  for (const std::string& answer : answers) {
    for (size_t at = generated.find(answer); at != std::string_view::npos;
         at = generated.find(answer, at + 1)) {
      const size_t end = at + answer.size();
      if ((at == 0 || !word_character(generated[at - 1])) &&
          (end == generated.size() || !word_character(generated[end]))) {
        ++found;
        break;
      }
    }
  }
  return static_cast<double>(found) / static_cast<double>(answers.size());
}

}  // namespace kelvin::data
