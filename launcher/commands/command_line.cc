// CLI11 parses; this file turns its errors into messages that name the option, the value and the
// remedy, and suggests the nearest command or option on a typo.
#include "launcher/commands/command_line.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <string_view>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/logging.h"
#include "core/strings/did_you_mean.h"
#include "launcher/commands/rank_failures.h"

namespace kelvin::launcher {
namespace {

constexpr const char* kHelpPointer =
    "(kelvin --help lists the commands, kelvin COMMAND --help a command's options)";

std::string DidYouMean(const std::string& name, const std::vector<std::string>& candidates) {
  const std::string closest = strings::ClosestName(name, candidates);
  return closest.empty() ? "" : absl::StrCat(" (did you mean ", closest, "?)");
}

// The option's name as the command line writes it: "--processes".
std::string LongName(const CLI::Option& option) {
  return option.get_lnames().empty() ? option.get_name() : "--" + option.get_lnames().front();
}

}  // namespace

int Fail(const absl::Status& status) {
  ReportFailure(absl::StrCat("kelvin: ", status.message(), "\n"));
  return status.code() == absl::StatusCode::kCancelled ? kExitPreempted : kExitFailed;
}

int UsageError(const std::string& problem) {
  std::fprintf(stderr, "kelvin: %s\n%s\n", problem.c_str(), kHelpPointer);
  return kExitUsage;
}

CommandLine::CommandLine()
    : app_("Kelvin: fine-tunes Llama-3 models with Selective Self-Attention", "kelvin") {
  app_.require_subcommand(1);
  app_.footer(
      "train and eval run one process, or one rank each under mpirun / srun with the job's layout\n"
      "(checkpoints resume under any layout).\n"
      "e.g. kelvin train configs/passkey_tiny_cpu.textproto --set optimizer.lr=1e-3\n"
      "kelvin --version: Kelvin's version and commit, and its libraries' versions\n"
      "exit codes: 0 done, 1 failed, 2 bad command line, 3 stopped by SIGTERM, SIGUSR1 or a\n"
      "first Ctrl-C (SIGINT) after saving a checkpoint (running the job again resumes)");
}

CLI::App* CommandLine::AddCommand(const std::string& name, const std::string& summary,
                                  const std::string& description, CommandRun run) {
  CLI::App* command = app_.add_subcommand(name, summary);
  command->footer(description);  // (a subcommand would inherit the list's footer)
  runs_[command] = std::move(run);
  return command;
}

void CommandLine::AddInput(CLI::App* command, std::string& path, const std::string& placeholder,
                           const std::string& what) {
  command->add_option(placeholder, path, "the " + what)->required()->type_name("");
  inputs_[command] = {placeholder, what};
}

CLI::Option* CommandLine::AddValue(CLI::App* command, const std::string& name,
                                   const std::string& placeholder, const std::string& what,
                                   const std::string& help,
                                   std::function<std::string(const std::string&)> apply,
                                   ValueRules rules) {
  const std::string command_name = command->get_name();
  CLI::Option* option = command->add_option(name, help)->type_name(placeholder);
  option->allow_extra_args(false);
  option->multi_option_policy(rules.repeatable ? CLI::MultiOptionPolicy::TakeAll
                                               : CLI::MultiOptionPolicy::Throw);
  option->each([=](const std::string& value) {
    // CLI11 takes the next argument as the value even when it is an option.
    if (value.starts_with("--")) {
      throw CLI::ValidationError(absl::StrCat(name, " needs a value (", what, ")"));
    }
    if (value.empty() && !rules.allow_empty) {
      throw CLI::ValidationError(absl::StrCat(command_name, " ", name, " is empty: give ", what));
    }
    const std::string problem = apply(value);
    if (!problem.empty()) throw CLI::ValidationError(absl::StrCat(name, " ", value, ": ", problem));
  });
  what_[option] = what;
  return option;
}

CLI::Option* CommandLine::AddText(CLI::App* command, const std::string& name,
                                  const std::string& placeholder, const std::string& what,
                                  const std::string& help, std::string& value, ValueRules rules) {
  return AddValue(
      command, name, placeholder, what, help,
      [&value](const std::string& text) {
        value = text;
        return std::string();
      },
      rules);
}

CLI::Option* CommandLine::AddFlag(CLI::App* command, const std::string& name,
                                  const std::string& help, bool& value) {
  return command->add_flag(name, value, help);
}

const CLI::Option* CommandLine::FindOption(const CLI::App& command, const std::string& name) const {
  for (const CLI::Option* option : command.get_options()) {
    if (!option->get_positional() && LongName(*option) == name) return option;
  }
  return nullptr;
}

std::string CommandLine::ExplainExtra(const CLI::App& command, const std::string& extra) const {
  const std::string& name = command.get_name();
  if (!extra.starts_with("-")) {
    const auto input = inputs_.find(&command);
    std::string given;
    if (input != inputs_.end()) {
      const CLI::Option* option = command.get_option_no_throw(input->second.first);
      if (option != nullptr && option->count() > 0) given = option->as<std::string>();
    }
    return absl::StrCat("unexpected argument \"", extra, "\" for ", name, " (its ",
                        input == inputs_.end() ? "input" : input->second.second, " is \"", given,
                        "\")");
  }
  const std::string option = extra.substr(0, extra.find('='));
  std::vector<std::string> owners;
  for (const CLI::App* other : app_.get_subcommands({})) {
    if (FindOption(*other, option) != nullptr) owners.push_back(other->get_name());
  }
  if (!owners.empty()) {
    return absl::StrCat(option, " is an option of ", absl::StrJoin(owners, ", "), ", not of ",
                        name);
  }
  std::vector<std::string> options;
  for (const CLI::Option* o : command.get_options()) {
    if (!o->get_positional()) options.push_back(LongName(*o));
  }
  return absl::StrCat("unknown option \"", option, "\" for ", name, DidYouMean(option, options));
}

std::string CommandLine::Explain(const CLI::ParseError& error) const {
  const std::string message = error.what();
  const auto chosen = app_.get_subcommands();
  if (chosen.empty()) return message;
  const CLI::App& command = *chosen.front();
  const std::string& name = command.get_name();
  if (dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    const std::vector<std::string> extras = command.remaining();
    return extras.empty() ? message : ExplainExtra(command, extras.front());
  }
  if (dynamic_cast<const CLI::RequiredError*>(&error) != nullptr) {
    const auto input = inputs_.find(&command);
    if (input != inputs_.end() && command.get_option(input->second.first)->count() == 0) {
      return absl::StrCat(name, " needs a ", input->second.second, ": kelvin ", name, " ",
                          input->second.first);
    }
    for (const CLI::Option* option : command.get_options()) {
      if (option->get_required() && option->count() == 0) {
        return absl::StrCat(name, " needs ", LongName(*option), " ", option->get_type_name());
      }
    }
    return message;
  }
  // The rest name their option first: "--processes: ...".
  const std::string option = message.substr(0, message.find(':'));
  if (dynamic_cast<const CLI::ValidationError*>(&error) != nullptr) {
    return message.substr(std::min(message.size(), option.size() + 2));
  }
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&error) != nullptr) {
    const CLI::Option* spec = FindOption(command, option);
    const auto what = spec == nullptr ? what_.end() : what_.find(spec);
    const std::string value = what == what_.end() ? "a value" : what->second;
    if (message.find("missing") != std::string::npos) {
      return absl::StrCat(option, " needs a value (", value, ")");
    }
    return absl::StrCat(option, " is given more than once: give it once");
  }
  return message;
}

int CommandLine::Run(int argc, char** argv) {
  // A process that no launcher started (no rank in its environment) is the only one: its log
  // lines say r0, not r? (MPI sets the rank again where a launcher started several).
  if (LogRank() < 0) SetLogRank(0);
  // "--x=" gives --x an empty value (CLI11 would take the next argument as it).
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.starts_with("--") && arg.size() > 3 && arg.ends_with("=")) {
      args.push_back(arg.substr(0, arg.size() - 1));
      args.emplace_back();
    } else {
      args.push_back(arg);
    }
  }
  std::vector<std::string> commands;
  for (const CLI::App* command : app_.get_subcommands({})) commands.push_back(command->get_name());
  if (args.empty()) {
    return UsageError(absl::StrCat("a command is needed: ", absl::StrJoin(commands, ", ")));
  }
  if (args[0] == "help") {
    std::printf("%s", app_.help().c_str());
    return 0;
  }
  const bool help = args[0] == "-h" || args[0] == "--help";  // CLI11 prints it
  if (args[0].starts_with("-") && !help) {
    return UsageError(absl::StrCat("unknown option \"", args[0],
                                   "\": give a command first: ", absl::StrJoin(commands, ", ")));
  }
  if (!help && std::find(commands.begin(), commands.end(), args[0]) == commands.end()) {
    return UsageError(absl::StrCat("unknown command \"", args[0], "\"",
                                   DidYouMean(args[0], commands),
                                   "; the commands: ", absl::StrJoin(commands, ", ")));
  }
  try {
    std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 takes them backwards
    app_.parse(reversed);
  } catch (const CLI::CallForHelp& help) {
    return app_.exit(help);
  } catch (const CLI::ParseError& error) {
    return UsageError(Explain(error));
  }
  return runs_.at(app_.get_subcommands().front())();
}

void AddJobArguments(CommandLine& line, CLI::App* command, JobArguments& job) {
  line.AddInput(command, job.path, "JOB.textproto", "job file");
  line.AddValue(command, "--set", "field.path=value", "field.path=value",
                "a job field's new value, e.g. optimizer.lr=1e-3 (repeatable)",
                [&job](const std::string& value) {
                  job.overrides.push_back(value);
                  return std::string();
                },
                {.repeatable = true});
}

void AddCheckpointChoice(CommandLine& line, CLI::App* command,
                         training::CheckpointChoice& checkpoint) {
  line.AddValue(command, "--step", "N", "a step count >= 0",
                "the checkpoint of step N instead of the newest",
                [&checkpoint](const std::string& text) {
                  int64_t step = 0;
                  const std::string problem = ParseInteger(text, 0, "a step count >= 0", step);
                  if (problem.empty()) checkpoint.step = step;
                  return problem;
                });
  line.AddFlag(command, "--best", "the lowest evaluation loss's checkpoint (checkpoint.keep_best)",
               checkpoint.best);
}

std::optional<int> CheckCheckpointChoice(const std::string& command,
                                         const training::CheckpointChoice& checkpoint) {
  if (!checkpoint.best || !checkpoint.step.has_value()) return std::nullopt;
  return UsageError(command + " takes --step N or --best, not both");
}

std::string ParseInteger(const std::string& text, int64_t min, const std::string& what,
                         int64_t& value, int64_t max) {
  int64_t parsed = 0;
  const bool integer = absl::SimpleAtoi(text, &parsed);
  if (integer && parsed >= min && parsed <= max) {
    value = parsed;
    return "";
  }
  if (integer && parsed > max) return absl::StrCat("give ", what, ", at most ", max);
  return "give " + what;
}

std::string ParseInteger(const std::string& text, int64_t min, const std::string& what,
                         int& value) {
  int64_t wide = 0;
  const std::string problem = ParseInteger(text, min, what, wide, INT_MAX);
  if (problem.empty()) value = static_cast<int>(wide);
  return problem;
}

std::string ParseNumber(const std::string& text, const std::string& what, double& value) {
  return absl::SimpleAtod(text, &value) ? "" : "give " + what;
}

std::string ParseDevice(const std::string& text, bool& cuda) {
  const std::string name = absl::AsciiStrToLower(text);
  if (name != "cpu" && name != "cuda") return "give cpu or cuda";
  cuda = name == "cuda";
  return "";
}

}  // namespace kelvin::launcher
