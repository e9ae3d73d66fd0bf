// `dice doctor`: is this machine ready to judge? Runs a probe through the judge's sandbox and
// reports the protections granted and whether torch (and CUDA) work inside it; when they do not,
// finds the override that makes them work.
//   dice doctor                       # CPU judge, sandbox as configured
//   dice doctor --set device=cuda     # also a CUDA op inside the sandbox
//   dice doctor --all -c judge.yaml   # every variant, even when the configured one passes
#include <unistd.h>

#include <cstdio>

#include "dice/config/config.h"
#include "dice/judge/doctor.h"
#include "dice/judge/sandbox.h"
#include "dice/util/error.h"
#include "dice/util/log.h"
#include "subcommand.h"

namespace dice::app {
namespace {

struct DoctorArgs {
  ConfigArgs config;
  bool all = false;
};

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

void run(const DoctorArgs& a) {
  auto cfg = config::load<judge::JudgeConfig>(config::load_tree(a.config.config_path, a.config.sets));
  const bool cuda = cfg.device == "cuda";
  std::printf("dice doctor: python %s, device %s, sandbox %s\n",
              (cfg.python.empty() ? judge::default_python() : cfg.python).c_str(), cuda ? "cuda" : "cpu",
              cfg.sandbox.enabled ? "on" : "off");
  if (judge::uses_user_namespace(cfg.sandbox)) {  // a cluster user: the sandbox is a user namespace
    const std::string problem = judge::user_namespace_problem(cfg.sandbox);
    std::printf("not root (uid %d): %s\n", static_cast<int>(getuid()),
                problem.empty() ? "this machine grants the user namespace the sandbox is built in" : problem.c_str());
    std::fflush(stdout);
    DICE_REQUIRE(problem.empty() || cfg.sandbox.allow_unsandboxed, problem);
  }
  auto d = judge::diagnose_sandbox(cfg, cuda, a.all);
  std::printf("sandbox as configured: %s\n", d.probes.front().mode.c_str());
  std::printf("\n| variant | result | protections applied | refused | files left outside scratch | seen by the next "
              "candidate | remount / | network | s |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  auto none = [](const std::vector<std::string>& v) { return v.empty() ? std::string("none") : "ALLOWED: " + join(v, " "); };
  for (const auto& p : d.probes)
    std::printf("| %s | %s: %s | %s | %s | %s | %s | %s | %s | %.1f |\n", p.variant.c_str(), p.ok ? "ok" : "FAIL",
                p.detail.c_str(), join(p.applied, " ").c_str(), join(p.missing, " ").c_str(), none(p.written).c_str(),
                none(p.seen).c_str(), p.remount_blocked ? "blocked" : "ALLOWED", p.network_blocked ? "blocked" : "ALLOWED",
                p.seconds);
  std::fflush(stdout);
  const auto& first = d.probes.front();
  if (first.ok) {
    const bool holds = first.written.empty() && first.seen.empty() && first.remount_blocked;
    std::printf("\ndice doctor: the judge's sandbox works here%s; %s.\n", cuda ? ", CUDA included" : "",
                holds ? "no file left outside scratch, none seen by the next candidate, no remount"
                      : "but it does NOT hold (see the table)");
    return;
  }
  std::string sets;
  for (const auto& f : d.fix) sets += " --set " + f;
  DICE_REQUIRE(false, "torch", cuda ? " with CUDA" : "", " does not work inside the judge's sandbox as configured (",
               first.detail, ")",
               d.fixed ? str(". It works with:", sets, " (add these to the judge config)")
                       : std::string(". No sandbox variant fixes it: check the Python and its torch outside dice"));
}

void setup_doctor(CLI::App& cmd) {
  auto a = std::make_shared<DoctorArgs>();
  a->config.add_to(cmd);
  cmd.add_flag("--all", a->all, "probe every variant even when the configured sandbox works");
  cmd.callback([a] { run(*a); });
}

}  // namespace

DICE_SUBCOMMAND("doctor", "check that the judge's sandbox (and CUDA inside it) works on this machine", setup_doctor);

}  // namespace dice::app
