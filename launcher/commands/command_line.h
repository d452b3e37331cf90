// The `kelvin` command line on CLI11: each command registers its options here and runs after the
// parse; usage errors (exit 2) name the option and value and what to give instead.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "configs/kelvin.pb.h"
#include "training/checkpoint/checkpoint.h"

namespace kelvin::launcher {

// Exit codes: 0 done, 1 failed, 2 bad command line, 3 stopped by a preemption signal after saving
// its checkpoint (every rank agreed; running the job again resumes).
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitPreempted = 3;

// Prints "kelvin: <message>" on stderr (held while several ranks run: rank_failures.h);
// kExitPreempted for a cancelled status, else kExitFailed.
int Fail(const absl::Status& status);
// Prints "kelvin: <problem>" and where the help is; kExitUsage.
int UsageError(const std::string& problem);

// What a command's run returns: an exit code.
using CommandRun = std::function<int()>;

// How an option's values may come.
struct ValueRules {
  bool repeatable = false;   // each occurrence applied in order; else once at most
  bool allow_empty = false;  // else an empty value is refused before it is applied
};

class CommandLine {
 public:
  CommandLine();

  // A command: `summary` is its line in `kelvin --help`, `description` its help's first lines.
  CLI::App* AddCommand(const std::string& name, const std::string& summary,
                       const std::string& description, CommandRun run);

  // The command's input file, required: `placeholder` as usage shows it ("JOB.textproto"),
  // `what` as messages name it ("job file").
  void AddInput(CLI::App* command, std::string& path, const std::string& placeholder,
                const std::string& what);

  // An option taking a value. `apply` checks and stores one value: it returns "" or what to give
  // instead ("give a process count >= 1"). `what` names the value in messages ("a process count
  // >= 1"); `placeholder` shows it in the help ("N").
  CLI::Option* AddValue(CLI::App* command, const std::string& name, const std::string& placeholder,
                        const std::string& what, const std::string& help,
                        std::function<std::string(const std::string&)> apply,
                        ValueRules rules = {});
  // The same for a text value, stored as it is.
  CLI::Option* AddText(CLI::App* command, const std::string& name, const std::string& placeholder,
                       const std::string& what, const std::string& help, std::string& value,
                       ValueRules rules = {});
  CLI::Option* AddFlag(CLI::App* command, const std::string& name, const std::string& help,
                       bool& value);

  // Parses argv and runs the chosen command; the exit code.
  int Run(int argc, char** argv);

 private:
  // The usage error of a CLI11 parse error, in this command line's words.
  std::string Explain(const CLI::ParseError& error) const;
  std::string ExplainExtra(const CLI::App& command, const std::string& extra) const;
  const CLI::Option* FindOption(const CLI::App& command, const std::string& name) const;

  CLI::App app_;
  std::map<const CLI::App*, CommandRun> runs_;
  std::map<const CLI::App*, std::pair<std::string, std::string>> inputs_;  // placeholder, what
  std::map<const CLI::Option*, std::string> what_;                         // value descriptions
};

// Options more than one command takes.
struct JobArguments {
  std::string path;                    // the job file (or, for some commands, a model directory)
  std::vector<std::string> overrides;  // --set field.path=value, in order
};
// The job file and --set.
void AddJobArguments(CommandLine& line, CLI::App* command, JobArguments& job);
// --step N and --best (refused together by CheckCheckpointChoice).
void AddCheckpointChoice(CommandLine& line, CLI::App* command,
                         training::CheckpointChoice& checkpoint);
// A usage error's exit code when --step and --best are both given.
std::optional<int> CheckCheckpointChoice(const std::string& command,
                                         const training::CheckpointChoice& checkpoint);

// Parsers for AddValue: the integer or number in `text` within the bounds, into `value`; "" or
// "give <what>" (", at most <max>" added for an integer above it).
std::string ParseInteger(const std::string& text, int64_t min, const std::string& what,
                         int64_t& value, int64_t max = INT64_MAX);
std::string ParseInteger(const std::string& text, int64_t min, const std::string& what, int& value);
std::string ParseNumber(const std::string& text, const std::string& what, double& value);
// --device's value: cpu or cuda, in any case (training.device spells them CPU and CUDA), into
// `cuda`; "" or what to give.
std::string ParseDevice(const std::string& text, bool& cuda);

}  // namespace kelvin::launcher
