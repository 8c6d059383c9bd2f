// flags.cpp: the allow-list of load_inline's extra flags (the table is the rule; flags.h says why).
//
// Chosen from what KernelBench solutions and torch load_inline users pass: -O3, --use_fast_math,
// -std=c++17, -DNDEBUG, -U__CUDA_NO_HALF_OPERATORS__, --expt-relaxed-constexpr,
// --expt-extended-lambda, -lineinfo, -Xptxas -O3 / -v / -dlcm=cg, --ptxas-options=-v,
// -maxrregcount=N, -Xcompiler -O3, -lcublas, -lcublasLt, -lcudnn, -arch=sm_90a / -gencode ...
// (ignored, see flags.h). Everything that reads or writes a file the compiler was not given, runs
// another program or changes the output's name is refused: -wrapper, -B, -specs, -fplugin, @file,
// -o, -M*, -save-temps, --keep, -fdump-*, -fprofile-*, -ccbin, --compiler-bindir, -Xlinker,
// -Xnvlink, -Wl,<anything not listed>, -T, -include/-imacros of absolute paths.
#include "anvil/env/flags.h"

#include <filesystem>
#include <regex>

namespace anvil {

namespace {

// -f flags a kernel may want (each also as -fno-NAME, and NAME=value where it takes one).
constexpr const char* kCodegenF =
    "fast-math|finite-math-only|unsafe-math-optimizations|associative-math|reciprocal-math|math-errno|"
    "trapping-math|signed-zeros|rounding-math|cx-limited-range|fp-contract|excess-precision|strict-aliasing|"
    "strict-overflow|wrapv|PIC|pic|PIE|pie|visibility|visibility-inlines-hidden|openmp|openmp-simd|"
    "omit-frame-pointer|unroll-loops|unroll-all-loops|peel-loops|tree-vectorize|tree-loop-vectorize|"
    "tree-slp-vectorize|vect-cost-model|simd-cost-model|inline|inline-functions|inline-small-functions|"
    "inline-limit|exceptions|rtti|permissive|threadsafe-statics|diagnostics-color|diagnostics-show-option|"
    "max-errors|template-depth|constexpr-depth|constexpr-loop-limit|constexpr-ops-limit|constexpr-steps|"
    "stack-protector|stack-protector-strong|prefetch-loop-arrays|align-functions|align-loops|builtin|char8_t|"
    "concepts|coroutines|expensive-optimizations|gcse|ipa-pta|schedule-insns|schedule-insns2|"
    "optimize-sibling-calls|signed-char|unsigned-char|ivopts|loop-interchange|loop-unroll-and-jam|"
    "var-tracking|extended-identifiers|gnu-keywords|operator-names";

// Host compiler flags of one token (paths are checked apart).
const std::vector<std::regex>& host_rules() {
  static const std::vector<std::regex> r = [] {
    std::vector<std::string> p = {
        R"(-O[0-3sgz]?|-Ofast)",
        R"(-D[A-Za-z_][A-Za-z0-9_]*(=\S*)?)",
        R"(-U[A-Za-z_][A-Za-z0-9_]*)",
        R"(-std=(c|gnu)\+\+(98|03|0x|11|1y|14|1z|17|2a|20|2b|23|2c|26))",
        // Warnings, but not -Wl, -Wa, -Wp (options for the linker, assembler, preprocessor).
        R"(-W(?!(l|a|p)(,|$))(no-)?[A-Za-z0-9][A-Za-z0-9_+=-]*)",
        R"(-w|-pedantic|-pedantic-errors|-pthread|-g[0-3]?|-ggdb[0-3]?)",
        std::string(R"(-f(no-)?()") + kCodegenF + R"()(=[A-Za-z0-9_.+-]+)?)",
        R"(-m(no-)?(avx[0-9a-z]*|fma4?|f16c|sse[0-9.]*|ssse3|popcnt|bmi2?|lzcnt|movbe|amx-[a-z0-9]+))",
        R"(-m(arch|tune)=[A-Za-z0-9_.-]+|-mprefer-vector-width=[0-9a-z]+)",
    };
    std::vector<std::regex> out;
    for (const auto& s : p) out.emplace_back(s);
    return out;
  }();
  return r;
}

// nvcc flags of one token (the value-taking ones are in Checker::cuda).
const std::vector<std::regex>& cuda_rules() {
  static const std::vector<std::regex> r = [] {
    std::vector<std::string> p = {
        R"(-O[0-3])",
        R"(-D[A-Za-z_][A-Za-z0-9_]*(=\S*)?)",
        R"(-U[A-Za-z_][A-Za-z0-9_]*)",
        R"(-std=c\+\+(03|11|14|17|20))",
        R"(--?use_fast_math|-lineinfo|--generate-line-info)",
        R"(--?expt-relaxed-constexpr|--?expt-extended-lambda|--?extended-lambda)",
        R"(--?maxrregcount=[0-9]+)",
        R"(--?(ftz|prec-div|prec-sqrt|fmad)=(true|false))",
        R"(--?restrict|--resource-usage|-res-usage)",
        R"(--?default-stream=(per-thread|legacy|null))",
        R"(-w|--disable-warnings|-W(no-)?[a-z0-9][a-z0-9_+=-]*)",
        R"(--?diag[-_]suppress=[0-9A-Za-z_,]+)",
        R"(-G|-g|--threads=[0-9]+|-t[0-9]+)",
    };
    std::vector<std::regex> out;
    for (const auto& s : p) out.emplace_back(s);
    return out;
  }();
  return r;
}

// Options for ptxas (-Xptxas a,b / --ptxas-options=a,b).
const std::regex& ptxas_rule() {
  static const std::regex r(
      R"(-v|--verbose|-O[0-3]|--opt-level=[0-3]|-dlcm=(ca|cg|cs|lu|cv)|-dscm=(wb|cg|cs|wt)|)"
      R"(--def-load-cache=(ca|cg|cs|lu|cv)|--def-store-cache=(wb|cg|cs|wt)|--warn-on-spills|-warn-spills|)"
      R"(--warn-on-local-memory-usage|-warn-lmem-usage|--warn-on-double-precision-use|-warn-double-usage|)"
      R"(--?maxrregcount=[0-9]+|--allow-expensive-optimizations(=(true|false))?|-allow-expensive-optimizations|)"
      R"(--?fmad=(true|false)|--disable-optimizer-constants|-disable-optimizer-consts|)"
      R"(--?suppress-stack-size-warning|--warning-as-error|-Werror|-lineinfo|--generate-line-info)");
  return r;
}

// Options for cudafe (-Xcudafe a,b).
const std::regex& cudafe_rule() {
  static const std::regex r(R"(--diag_suppress=[0-9A-Za-z_,]+|--display_error_number)");
  return r;
}

// Linker flags of one token (-L and -Wl are checked apart).
const std::regex& link_rule() {
  static const std::regex r(R"(-l[A-Za-z0-9_+.-]+|-pthread|-fopenmp)");
  return r;
}

// Items of -Wl,a,b that change nothing but how (and what) the linker links.
const std::regex& wl_rule() {
  static const std::regex r(R"(--no-as-needed|--as-needed|-O[0-2]|--gc-sections|-s|--strip-all|--strip-debug)");
  return r;
}

constexpr const char* kHostAllowed =
    "-O*, -D*, -U*, -std=*, -I<relative>, -isystem <relative>, -W*, -w, -g, -pthread, -f<code-generation "
    "flags> (-ffast-math, -funroll-loops, -fopenmp, -fno-strict-aliasing, ...), -march=*, -mtune=*, "
    "-m<instruction set> (-mavx2, -mfma, ...)";
constexpr const char* kCudaAllowed =
    "-O*, -D*, -U*, -std=*, -I<relative>, --use_fast_math, -lineinfo, -Xptxas <ptxas options> (-v, -O3, "
    "-dlcm=cg, --warn-on-spills, ...), --ptxas-options=*, -maxrregcount=N, --expt-relaxed-constexpr, "
    "--expt-extended-lambda, -Xcompiler <host flags>, --ftz/--prec-div/--prec-sqrt/--fmad=true|false, "
    "--restrict, -res-usage, --default-stream per-thread, -W*, -w, --diag-suppress=N, -G, -g; -arch, "
    "-gencode and -code are ignored: anvil builds for the GPU it judges on";
constexpr const char* kLinkAllowed =
    "-l<library> (-lcublas, -lcublasLt, -lcudnn, -lcuda, ...), -L<relative>, -pthread, -fopenmp, "
    "-Wl,--as-needed|--no-as-needed|-O1|--gc-sections|-s|-z,now|-z,relro|-z,noexecstack|-rpath,<path>";
constexpr const char* kPathAllowed =
    "a relative path without \"..\", or a directory of the toolchain (/usr, /opt, the Python and CUDA prefixes)";

constexpr size_t kMaxFlagChars = 1024;
constexpr size_t kMaxFlags = 256;

bool any_match(const std::vector<std::regex>& rules, const std::string& t) {
  for (const auto& r : rules) {
    if (std::regex_match(t, r)) return true;
  }
  return false;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == sep) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

// Walks one kind's tokens, keeping what passes; stops at the first refusal.
class Checker {
 public:
  Checker(FlagKind kind, const std::vector<std::string>& dirs) : kind_(kind), dirs_(dirs) {}

  FlagCheck run(const std::vector<std::string>& given) {
    for (const auto& g : given) {
      if (kind_ == FlagKind::IncludeDir) {
        std::string p = trimmed(g);
        if (!p.empty() && !path(p, "", kPathAllowed)) break;
        if (!p.empty()) out_.flags.push_back(p);
        continue;
      }
      for (const auto& t : words(g)) tokens_.push_back(t);
    }
    // Bounded before any pattern sees them (std::regex recurses per character).
    for (const auto& t : tokens_) {
      if (t.size() > kMaxFlagChars && out_.ok()) {
        out_.error = std::string(flag_kind_name(kind_)) + ": a flag of " + std::to_string(t.size()) +
                     " characters is not allowed (at most " + std::to_string(kMaxFlagChars) + ")";
      }
    }
    if (tokens_.size() > kMaxFlags && out_.ok()) {
      out_.error = std::string(flag_kind_name(kind_)) + ": " + std::to_string(tokens_.size()) +
                   " flags are too many (at most " + std::to_string(kMaxFlags) + ")";
    }
    while (out_.ok() && i_ < tokens_.size()) {
      const std::string t = tokens_[i_++];
      if (kind_ == FlagKind::Host) host(t);
      if (kind_ == FlagKind::Cuda) cuda(t);
      if (kind_ == FlagKind::Link) link(t);
    }
    if (!out_.ok()) out_.flags.clear();
    return out_;
  }

 private:
  static std::string trimmed(const std::string& s) {
    size_t a = s.find_first_not_of(" \t\n\r"), b = s.find_last_not_of(" \t\n\r");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
  }
  static std::vector<std::string> words(const std::string& s) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : s + " ") {
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        if (!cur.empty()) out.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    return out;
  }

  void refuse(const std::string& flag, const std::string& where, const char* allowed) {
    out_.error = std::string(flag_kind_name(kind_)) + ": \"" + flag + "\"" + (where.empty() ? "" : " (in " + where + ")") +
                 " is not allowed (allowed" + (where.empty() ? "" : " in " + where) + ": " + allowed + ")";
  }

  // The value after a flag that takes one (joined after '=' or the next token); false if none.
  bool value_of(const std::string& t, const std::string& name, std::string* v) {
    if (t.size() > name.size() && t.compare(0, name.size() + 1, name + "=") == 0) {
      *v = t.substr(name.size() + 1);
      return true;
    }
    if (t != name) return false;
    if (i_ >= tokens_.size()) {
      out_.error = std::string(flag_kind_name(kind_)) + ": \"" + name + "\" needs a value after it";
      *v = "";
      return true;
    }
    *v = tokens_[i_++];
    return true;
  }

  // A path a flag names: relative without "..", or absolute under the toolchain's directories
  // (never, for -include: a file forced into every unit must be the candidate's own).
  bool path(const std::string& p, const std::string& flag, const char* allowed, bool absolute_ok = true) {
    std::filesystem::path x(p);
    bool ok = !p.empty() && p[0] != '-' && (absolute_ok || !x.is_absolute());
    for (const auto& c : x) ok = ok && c != "..";
    if (ok && x.is_absolute()) {
      std::string n = x.lexically_normal().string();
      while (n.size() > 1 && n.back() == '/') n.pop_back();
      ok = false;
      for (const auto& d : dirs_) ok = ok || n == d || (n.compare(0, d.size() + 1, d + "/") == 0);
    }
    if (!ok) refuse(flag.empty() ? p : flag + " " + p, "", allowed);
    return ok;
  }

  // -I<p> / -I p, -isystem p, -iquote p, -idirafter p, -include p: true when t is one of them.
  bool include_flag(const std::string& t, const char* allowed) {
    for (const char* f : {"-isystem", "-iquote", "-idirafter", "-include"}) {
      std::string v;
      if (t == f && value_of(t, f, &v)) {
        if (out_.ok() && path(v, f, allowed, std::string(f) != "-include")) out_.flags.insert(out_.flags.end(), {f, v});
        return true;
      }
    }
    if (t.rfind("-I", 0) != 0) return false;
    std::string v = t.size() > 2 ? t.substr(2) : (i_ < tokens_.size() ? tokens_[i_++] : "");
    if (path(v, "-I", allowed)) out_.flags.push_back("-I" + v);
    return true;
  }

  void host(const std::string& t) {
    if (include_flag(t, kHostAllowed)) return;
    if ((t == "-D" || t == "-U") && i_ < tokens_.size()) return host(t + tokens_[i_++]);
    if (!any_match(host_rules(), t)) return refuse(t, "", kHostAllowed);
    out_.flags.push_back(t);
  }

  // A comma list handed to another tool (-Xptxas, -Xcompiler, -Xcudafe): every item must pass.
  bool nested(const std::string& t, const std::string& name, const std::string& canonical) {
    std::string v;
    if (!value_of(t, name, &v)) return false;
    if (!out_.ok()) return true;
    for (const auto& item : split(v, ',')) {
      bool ok = canonical == "-Xcompiler"  ? any_match(host_rules(), item)
                : canonical == "-Xptxas"   ? std::regex_match(item, ptxas_rule())
                                           : std::regex_match(item, cudafe_rule());
      if (item.empty()) continue;
      if (!ok) {
        refuse(item, canonical, canonical == "-Xcompiler" ? kHostAllowed
                               : canonical == "-Xptxas"  ? "-v, -O*, -dlcm=*, -dscm=*, --warn-on-spills, "
                                                           "--warn-on-local-memory-usage, -maxrregcount=N, --fmad=*"
                                                         : "--diag_suppress=N, --display_error_number");
        return true;
      }
    }
    out_.flags.insert(out_.flags.end(), {canonical, v});
    return true;
  }

  void cuda(const std::string& t) {
    if (include_flag(t, kCudaAllowed)) return;
    if ((t == "-D" || t == "-U") && i_ < tokens_.size()) return cuda(t + tokens_[i_++]);
    if (nested(t, "-Xptxas", "-Xptxas") || nested(t, "--ptxas-options", "-Xptxas") ||
        nested(t, "-Xcompiler", "-Xcompiler") || nested(t, "--compiler-options", "-Xcompiler") ||
        nested(t, "-Xcudafe", "-Xcudafe"))
      return;
    std::string v;
    for (const char* a : {"-arch", "--gpu-architecture", "-gencode", "--generate-code", "-code", "--gpu-code"}) {
      if (value_of(t, a, &v)) {
        if (out_.ok()) out_.ignored.push_back(t == a ? t + " " + v : t);
        return;
      }
    }
    for (const char* a : {"-maxrregcount", "--maxrregcount", "-default-stream", "--default-stream", "--threads", "-t"}) {
      if (t == a && value_of(t, a, &v)) {
        if (out_.ok()) cuda(std::string(a) + (std::string(a) == "-t" ? "" : "=") + v);
        return;
      }
    }
    if (!any_match(cuda_rules(), t)) return refuse(t, "", kCudaAllowed);
    out_.flags.push_back(t);
  }

  // -Wl,a,b: every item listed, or -z KEYWORD, or -rpath PATH.
  void wl(const std::string& t) {
    std::vector<std::string> items = split(t.substr(4), ',');
    for (size_t k = 0; k < items.size(); ++k) {
      const std::string& it = items[k];
      bool ok = std::regex_match(it, wl_rule());
      if (it == "-z" && k + 1 < items.size()) {
        ok = items[k + 1] == "now" || items[k + 1] == "relro" || items[k + 1] == "noexecstack";
        ++k;
      } else if (it == "-rpath" && k + 1 < items.size()) {
        if (!path(items[++k], "-Wl,-rpath", kLinkAllowed)) return;
        ok = true;
      }
      if (!ok) return refuse(t, "", kLinkAllowed);
    }
    out_.flags.push_back(t);
  }

  void link(const std::string& t) {
    if (t.rfind("-Wl,", 0) == 0) return wl(t);
    if (t.rfind("-L", 0) == 0) {
      std::string v = t.size() > 2 ? t.substr(2) : (i_ < tokens_.size() ? tokens_[i_++] : "");
      if (path(v, "-L", kLinkAllowed)) out_.flags.push_back("-L" + v);
      return;
    }
    if (!std::regex_match(t, link_rule())) return refuse(t, "", kLinkAllowed);
    out_.flags.push_back(t);
  }

  FlagKind kind_;
  const std::vector<std::string>& dirs_;
  std::vector<std::string> tokens_;
  size_t i_ = 0;
  FlagCheck out_;
};

}  // namespace

const char* flag_kind_name(FlagKind kind) {
  switch (kind) {
    case FlagKind::Host: return "extra_cflags";
    case FlagKind::Cuda: return "extra_cuda_cflags";
    case FlagKind::Link: return "extra_ldflags";
    case FlagKind::IncludeDir: return "extra_include_paths";
  }
  return "";
}

FlagCheck check_flags(FlagKind kind, const std::vector<std::string>& given, const std::vector<std::string>& dirs) {
  return Checker(kind, dirs).run(given);
}

}  // namespace anvil
