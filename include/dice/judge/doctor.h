#pragma once
// Sandbox diagnosis (`dice doctor`): runs a small probe through the judge's own sandboxed spawn
// path and reports which protections this machine grants, whether torch (and CUDA) work inside
// the sandbox, and, when they do not, which single protection (or growing set of protections)
// has to be switched off for them to work.
#include <string>
#include <vector>

#include "dice/judge/judge.h"

namespace dice::judge {

struct ProbeResult {
  std::string variant;  // "as configured", or the --set override that made this variant
  bool ok = false;      // torch imported (and a CUDA op ran, when cuda)
  std::string detail;   // a short description: device name, or the error
  bool write_outside_blocked = false;  // the first leak probe wrote nowhere outside its scratch
  bool network_blocked = false;
  // Leak probes (no torch): the first, as the sandbox uid of slot 0, tries to leave a file in /,
  // /tmp, /var/tmp, /dev/shm, /dev, /run, /run/lock, beside its scratch directory, in every
  // world-writable directory found, and to write /proc/sys and remount / writable; the second, as
  // the next slot's uid, looks for those files. `written`: where the first succeeded; `seen`: what
  // the second found; both empty when the sandbox holds.
  std::vector<std::string> written, seen;
  bool remount_blocked = false;
  std::string mode;  // describe_sandbox() of this variant
  std::vector<std::string> applied, missing;  // protections (subprocess.h names)
  double seconds = 0;
};

struct Diagnosis {
  bool cuda = false;
  std::vector<ProbeResult> probes;  // probes[0] is "as configured"
  // The overrides that make the probe pass, when the configured sandbox fails ("" = none found,
  // or not needed).
  std::vector<std::string> fix;
  bool fixed = false;
};

// Runs one probe with `cfg.sandbox`; `cuda` also runs a CUDA op.
ProbeResult probe_sandbox(const JudgeConfig& cfg, bool cuda, const std::string& variant = "as configured");

// The probe as configured; if it fails (or `all`), every single-protection variant, then a
// cumulative search when no single one is enough.
Diagnosis diagnose_sandbox(const JudgeConfig& cfg, bool cuda, bool all);

}  // namespace dice::judge
