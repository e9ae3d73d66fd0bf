// dice_bind.h: the table a fast-built extension exports instead of a pybind11 module (fastbuild.py).
//
// load_inline's main.cpp ends with PYBIND11_MODULE(...) { m.def("f", torch::wrap_pybind_function(f)); }:
// a few seconds of pybind11 template code per candidate, even with the torch headers precompiled.
// A fast build ends instead with
//     DICE_BIND_TABLE(DICE_BIND(f, "doc") DICE_BIND(g, "doc"))
// which exports `dice_bind_table`: per function its name, docstring, one type code per parameter,
// and a call that takes the arguments as IValues. dice_bind_py.cpp (one pybind11 module, built once
// per toolchain) converts Python arguments the way pybind11's casters do, calls through the table
// under torch's error handling (the wrap_pybind_function translation), and converts the result.
// A parameter or return type not listed here does not compile: the build then falls back to
// load_inline's own main.cpp.
#pragma once
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/core/ivalue.h>
#include <ATen/core/ivalue_inl.h>

namespace dice_bind {

constexpr int kVersion = 1;
using Stack = std::vector<c10::IValue>;

struct Entry {
  const char* name;
  const char* doc;
  const char* args;  // one code per parameter (see Arg)
  void (*call)(Stack& stack);  // the arguments in, the result (one IValue) out; throws on error
};

// Parameter types: code and conversion from the IValue the binding made.
template <class T> struct Arg;  // no definition: an unsupported parameter type does not compile
template <> struct Arg<at::Tensor> {
  static constexpr char code = 'T';
  static at::Tensor get(c10::IValue& v) { return std::move(v).toTensor(); }
};
template <> struct Arg<c10::optional<at::Tensor>> {
  static constexpr char code = 'O';
  static c10::optional<at::Tensor> get(c10::IValue& v) {
    return v.isNone() ? c10::optional<at::Tensor>() : c10::optional<at::Tensor>(std::move(v).toTensor());
  }
};
template <class I> struct IntArg {
  static constexpr char code = 'i';
  static I get(c10::IValue& v) { return static_cast<I>(v.toInt()); }
};
template <> struct Arg<int64_t> : IntArg<int64_t> {};
template <> struct Arg<int> : IntArg<int> {};
template <> struct Arg<long long> : IntArg<long long> {};
template <> struct Arg<unsigned> : IntArg<unsigned> {};
template <> struct Arg<uint64_t> : IntArg<uint64_t> {};
template <> struct Arg<unsigned long long> : IntArg<unsigned long long> {};
template <class F> struct FloatArg {
  static constexpr char code = 'd';
  static F get(c10::IValue& v) { return static_cast<F>(v.toDouble()); }
};
template <> struct Arg<double> : FloatArg<double> {};
template <> struct Arg<float> : FloatArg<float> {};
template <> struct Arg<bool> {
  static constexpr char code = 'b';
  static bool get(c10::IValue& v) { return v.toBool(); }
};
template <> struct Arg<std::string> {
  static constexpr char code = 's';
  static std::string get(c10::IValue& v) { return v.toStringRef(); }
};
template <> struct Arg<std::vector<int64_t>> {
  static constexpr char code = 'I';
  static std::vector<int64_t> get(c10::IValue& v) { return v.toIntVector(); }
};
template <> struct Arg<std::vector<double>> {
  static constexpr char code = 'D';
  static std::vector<double> get(c10::IValue& v) { return v.toDoubleVector(); }
};
template <> struct Arg<std::vector<at::Tensor>> {
  static constexpr char code = 'L';
  static std::vector<at::Tensor> get(c10::IValue& v) { return v.toTensorVector(); }
};

// Return types: what pybind11 would return, as an IValue (torch::jit::toPyObject converts it).
template <class R> struct Ret;  // no definition: an unsupported return type does not compile
template <> struct Ret<at::Tensor> {
  static c10::IValue to(at::Tensor r) { return c10::IValue(std::move(r)); }
};
template <> struct Ret<std::vector<at::Tensor>> {
  static c10::IValue to(std::vector<at::Tensor> r) { return c10::IValue(std::move(r)); }
};
template <class... T> struct Ret<std::tuple<T...>> {
  template <size_t... I>
  static c10::IValue to(std::tuple<T...>&& r, std::index_sequence<I...>) {
    return c10::ivalue::Tuple::create(std::vector<c10::IValue>{Ret<std::decay_t<T>>::to(std::move(std::get<I>(r)))...});
  }
  static c10::IValue to(std::tuple<T...> r) { return to(std::move(r), std::index_sequence_for<T...>{}); }
};
template <class T> struct IntRet {
  static c10::IValue to(T r) { return c10::IValue(static_cast<int64_t>(r)); }
};
template <> struct Ret<int64_t> : IntRet<int64_t> {};
template <> struct Ret<int> : IntRet<int> {};
template <> struct Ret<long long> : IntRet<long long> {};
template <> struct Ret<double> {
  static c10::IValue to(double r) { return c10::IValue(r); }
};
template <> struct Ret<float> {
  static c10::IValue to(float r) { return c10::IValue(static_cast<double>(r)); }
};
template <> struct Ret<bool> {
  static c10::IValue to(bool r) { return c10::IValue(r); }
};

// C++14 (torch 1.13 builds extensions with -std=c++14): no if constexpr, no std::apply.
template <class R> struct Invoke {
  template <class F, class Tuple, size_t... I>
  static void run(F f, Tuple& args, Stack& s, std::index_sequence<I...>) {
    auto r = f(std::get<I>(args)...);
    s.clear();
    s.emplace_back(Ret<std::decay_t<R>>::to(std::move(r)));
  }
};
template <> struct Invoke<void> {
  template <class F, class Tuple, size_t... I>
  static void run(F f, Tuple& args, Stack& s, std::index_sequence<I...>) {
    f(std::get<I>(args)...);
    s.clear();
    s.emplace_back();
  }
};

template <class R, class... A, size_t... I>
void invoke(R (*f)(A...), Stack& s, std::index_sequence<I...> seq) {
  std::tuple<std::decay_t<A>...> args{Arg<std::decay_t<A>>::get(s[I])...};
  Invoke<R>::run(f, args, s, seq);
}

template <class F> struct Fn;
template <class R, class... A> struct Fn<R (*)(A...)> {
  static constexpr char codes[sizeof...(A) + 1] = {Arg<std::decay_t<A>>::code..., '\0'};
  template <R (*f)(A...)> static void call(Stack& s) { invoke(f, s, std::index_sequence_for<A...>{}); }
};
template <class R, class... A> constexpr char Fn<R (*)(A...)>::codes[];

}  // namespace dice_bind

#define DICE_BIND(fn, doc) \
  {#fn, doc, ::dice_bind::Fn<decltype(&fn)>::codes, &::dice_bind::Fn<decltype(&fn)>::template call<&fn>},
#define DICE_BIND_TABLE(...)                                                                            \
  static const ::dice_bind::Entry dice_bind_entries_[] = {__VA_ARGS__};                                \
  extern "C" __attribute__((visibility("default"))) const ::dice_bind::Entry* dice_bind_table(int* n, \
                                                                                              int* version) { \
    *n = static_cast<int>(sizeof(dice_bind_entries_) / sizeof(dice_bind_entries_[0]));                 \
    *version = ::dice_bind::kVersion;                                                                   \
    return dice_bind_entries_;                                                                          \
  }
