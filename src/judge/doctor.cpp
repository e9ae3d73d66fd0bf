// Sandbox diagnosis: the judge's sandboxed spawn path with a probe script, under variants.
#include "dice/judge/doctor.h"

#include <dirent.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <random>

#include <nlohmann/json.hpp>

#include "dice/util/error.h"
#include "dice/util/fs.h"
#include "dice/util/log.h"
#include "dice/util/timer.h"

namespace dice::judge {

namespace {

// argv[1]: CUDA or not; argv[2]: a path next to the scratch dir (must not be writable).
constexpr const char* kProbe = R"PY(
import json, os, socket, sys
r = {"ok": False, "uid": os.getuid()}
try:
    p = sys.argv[2]
    with open(p, "w") as f:
        f.write("x")
    os.unlink(p)
    r["write_outside"] = True
except OSError:
    r["write_outside"] = False
try:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(1.0)
    s.connect(("1.1.1.1", 53))
    r["network"] = True
except OSError as e:
    r["network"] = e.errno not in (101, 99, 13, 1)  # ENETUNREACH, EADDRNOTAVAIL, EACCES, EPERM
try:
    import torch
    r["torch"] = torch.__version__
    if sys.argv[1] == "1":
        x = torch.ones(1024, device="cuda")
        assert float(x.sum().item()) == 1024.0
        r["detail"] = "torch %s, CUDA op ran on %s" % (torch.__version__, torch.cuda.get_device_name(0))
    else:
        r["detail"] = "torch %s imported" % torch.__version__
    r["ok"] = True
except BaseException as e:  # noqa: BLE001
    r["detail"] = ("%s: %s" % (type(e).__name__, e)).strip()[:600]
print(json.dumps(r))
)PY";

// argv[1]: "write" or "look"; argv[2]: the file name; argv[3:]: the directories to try.
constexpr const char* kLeakProbe = R"PY(
import ctypes, json, os, sys
mode, name, dirs = sys.argv[1], sys.argv[2], sys.argv[3:]
r = {"written": [], "seen": []}
for d in dirs:
    p = os.path.join(d, name)
    if mode == "write":
        try:
            with open(p, "w") as f:
                f.write("left by the first candidate")
            r["written"].append(d)
        except OSError:
            pass
    elif os.path.exists(p):
        r["seen"].append(d)
if mode == "write":
    try:
        v = open("/proc/sys/kernel/hostname").read()
        open("/proc/sys/kernel/hostname", "w").write(v)
        r["written"].append("/proc/sys")
    except OSError:
        pass
    libc = ctypes.CDLL(None, use_errno=True)
    r["remount"] = libc.mount(None, b"/", None, 32 | 4096, None) == 0  # MS_REMOUNT | MS_BIND: writable
print(json.dumps(r))
)PY";

// World-writable directories (o+w) a few levels below /, outside /proc, /sys and /dev.
std::vector<std::string> world_writable_dirs(const std::string& skip) {
  std::vector<std::string> out, todo = {"/"};
  for (int depth = 0; depth < 3 && out.size() < 24; ++depth) {
    std::vector<std::string> next;
    for (const auto& dir : todo) {
      DIR* d = opendir(dir.c_str());
      if (!d) continue;
      while (struct dirent* e = readdir(d)) {
        std::string n = e->d_name, path = (dir == "/" ? "" : dir) + "/" + n;
        struct stat st;
        if (n == "." || n == ".." || path == "/proc" || path == "/sys" || path == "/dev" || path.rfind(skip, 0) == 0 ||
            lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
          continue;
        if (st.st_mode & S_IWOTH) out.push_back(path);
        next.push_back(path);
      }
      closedir(d);
    }
    todo.swap(next);
  }
  return out;
}

std::string last_line(const std::string& s) {
  std::string t = s;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  size_t nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

// Applies one "sandbox.key=value" override to a copy of the sandbox settings.
SandboxConfig with_override(SandboxConfig sb, const std::string& set) {
  if (set == "sandbox.uid_base=-2") sb.uid_base = -2;
  else if (set == "sandbox.pid_namespace=false") sb.pid_namespace = false;
  else if (set == "sandbox.private_dev=false") sb.private_dev = false;
  else if (set == "sandbox.network_namespace=false") sb.network_namespace = false;
  else if (set == "sandbox.file_size_mb=0") sb.file_size_mb = 0;
  else if (set == "sandbox.open_files=0") sb.open_files = 0;
  else if (set == "sandbox.processes=0") sb.processes = 0;
  else if (set == "sandbox.enabled=false") sb.enabled = false;
  else DICE_CHECK(false, "unknown sandbox variant ", set);
  return sb;
}

const std::vector<std::string>& single_variants() {
  static const std::vector<std::string> v = {
      "sandbox.uid_base=-2",         "sandbox.pid_namespace=false",     "sandbox.private_dev=false",
      "sandbox.network_namespace=false", "sandbox.file_size_mb=0",      "sandbox.open_files=0",
      "sandbox.processes=0",         "sandbox.enabled=false"};
  return v;
}

}  // namespace

ProbeResult probe_sandbox(const JudgeConfig& cfg_in, bool cuda, const std::string& variant) {
  JudgeConfig cfg = cfg_in;
  if (cfg.python.empty()) cfg.python = default_python();
  std::string root = cfg.scratch_root.empty() ? fs::make_temp_dir("dice_doctor_") : cfg.scratch_root + "/doctor";
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  DICE_REQUIRE(!ec, "cannot create '", root, "': ", ec.message());
  chmod(root.c_str(), 0755);
  int uid = resolve_uid_base(cfg.sandbox, cfg.python);
  ProbeResult r;
  r.variant = variant;
  r.mode = describe_sandbox(cfg.sandbox, uid);
  Timer t;
  try {
    check_sandbox_settings(cfg.sandbox, uid);
  } catch (const Error& e) {  // a variant the judge refuses (e.g. private_dev=false as uid 0)
    r.detail = str("refused: ", e.what());
    return r;
  }
  {
    Scratch s(root + "/probe", uid);
    auto o = sandboxed_python(cfg.sandbox, cfg.python, {"-c", kProbe, cuda ? "1" : "0", root + "/escape"}, s.path(),
                              {}, uid, cuda, {});
    o.pipe_stdin = false;
    o.result_pipe = false;
    auto res = proc::run(o, 180);
    r.applied = res.protections;
    r.missing = res.protections_missing;
    auto j = nlohmann::json::parse(last_line(res.out), nullptr, false);
    if (j.is_object()) {
      r.ok = j.value("ok", false);
      r.detail = j.value("detail", "");
      r.network_blocked = !j.value("network", true);
    } else {
      r.detail = str("the probe ", res.status.describe(), ": ", last_line(res.err));
    }
    // CUDA's own complaint (e.g. "CUDA initialization: Error 304 ...") is a warning on stderr.
    if (!r.ok) {
      size_t at = res.err.find("CUDA initialization");
      if (at != std::string::npos) r.detail += " [stderr: " + res.err.substr(at, res.err.find('\n', at) - at) + "]";
    }
  }
  // Leak probes: one candidate leaves files, the next (another slot's uid, another scratch) looks.
  {
    const std::string name = str("dice_doctor_leak_", std::random_device{}(), "_", getpid());
    std::vector<std::string> dirs = {"/", "/tmp", "/var/tmp", "/dev/shm", "/dev", "/run", "/run/lock", root};
    // the user's own places: the home directory and where the command runs (a run directory)
    std::vector<std::string> more = world_writable_dirs(root);
    if (const passwd* pw = getpwuid(getuid()); pw && pw->pw_dir && fs::exists(pw->pw_dir)) more.push_back(pw->pw_dir);
    if (char cwd[4096]; getcwd(cwd, sizeof cwd)) more.push_back(cwd);
    for (const auto& w : more)
      if (std::find(dirs.begin(), dirs.end(), w) == dirs.end()) dirs.push_back(w);
    auto stage = [&](const std::string& mode, int slot) {
      int u = uid >= 0 ? uid + slot : uid;
      Scratch s(str(root, "/leak", slot), u);
      std::vector<std::string> args = {"-c", kLeakProbe, mode, name};
      args.insert(args.end(), dirs.begin(), dirs.end());
      auto o = sandboxed_python(cfg.sandbox, cfg.python, args, s.path(), {}, u, false, {});
      o.pipe_stdin = false;
      o.result_pipe = false;
      auto res = proc::run(o, 60);
      return nlohmann::json::parse(last_line(res.out), nullptr, false);
    };
    auto w = stage("write", 0);
    auto l = stage("look", 1);
    if (w.is_object()) {
      r.written = w.value("written", std::vector<std::string>{});
      r.remount_blocked = !w.value("remount", true);
      r.write_outside_blocked = r.written.empty();
    } else {
      r.written = {"(the leak probe did not run)"};
    }
    if (l.is_object()) r.seen = l.value("seen", std::vector<std::string>{});
    for (const auto& d : dirs) ::unlink((d + "/" + name).c_str());  // what leaked, cleaned up
  }
  if (cfg.scratch_root.empty()) fs::remove_tree(root);
  r.seconds = t.elapsed_s();
  return r;
}

Diagnosis diagnose_sandbox(const JudgeConfig& cfg, bool cuda, bool all) {
  Diagnosis d;
  d.cuda = cuda;
  d.probes.push_back(probe_sandbox(cfg, cuda));
  if (d.probes[0].ok && !all) return d;
  // One protection off at a time.
  for (const auto& v : single_variants()) {
    JudgeConfig c = cfg;
    c.sandbox = with_override(cfg.sandbox, v);
    d.probes.push_back(probe_sandbox(c, cuda, v));
    if (!d.probes[0].ok && d.probes.back().ok && d.fix.empty() && v != "sandbox.enabled=false") {
      d.fix = {v};
      d.fixed = true;
    }
  }
  if (d.probes[0].ok || d.fixed) return d;
  // No single one: switch them off cumulatively, in order, until the probe passes.
  JudgeConfig c = cfg;
  std::vector<std::string> acc;
  for (const auto& v : single_variants()) {
    if (v == "sandbox.enabled=false") break;
    acc.push_back(v);
    c.sandbox = with_override(c.sandbox, v);
    std::string name;
    for (auto& a : acc) name += (name.empty() ? "" : " ") + a;
    d.probes.push_back(probe_sandbox(c, cuda, name));
    if (d.probes.back().ok) {
      d.fix = acc;
      d.fixed = true;
      break;
    }
  }
  if (!d.fixed && d.probes[single_variants().size()].ok) {  // only enabled=false works
    d.fix = {"sandbox.enabled=false"};
    d.fixed = true;
  }
  return d;
}

}  // namespace dice::judge
