// dice_bind_py: the one pybind11 module that calls every fast-built extension (dice_bind.h).
// Built once per toolchain by `ext.py make-pch`, next to the precompiled headers.
//
//   h = open(path)            dlopen the extension (its static initialisers run, as on import)
//   table(h)                  [(name, doc, codes)], one per function of its functions= list
//   call(h, i, args)          function i on the positional arguments, converted as pybind11's
//                             casters convert them for those parameter types; errors translated as
//                             torch::wrap_pybind_function translates them; the result as pybind11
//                             returns it (tensors, lists, tuples, numbers, None)
#include <dlfcn.h>

#include <string>
#include <vector>

#include <torch/extension.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include "dice_bind.h"

namespace py = pybind11;

namespace {

struct Lib {
  void* handle = nullptr;
  const dice_bind::Entry* entries = nullptr;
  int n = 0;
};

[[noreturn]] void type_error(const std::string& what) { throw py::type_error(what); }

bool is_tensor(PyObject* o) { return THPVariable_Check(o); }

int64_t to_int(PyObject* o, const char* fn, size_t k) {
  // pybind11's integer caster: ints, bools and objects with __index__; never a float
  if (PyFloat_Check(o)) type_error(std::string(fn) + "(): argument " + std::to_string(k) + " must be int, not float");
  PyObject* idx = PyNumber_Index(o);
  if (!idx) {  // convert pass: objects with __int__
    PyErr_Clear();
    if (PyNumber_Check(o)) idx = PyNumber_Long(o);
    if (!idx) {
      PyErr_Clear();
      type_error(std::string(fn) + "(): argument " + std::to_string(k) + " must be int");
    }
  }
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(idx, &overflow);
  Py_DECREF(idx);
  if (overflow) type_error(std::string(fn) + "(): argument " + std::to_string(k) + " does not fit in 64 bits");
  return v;
}

double to_double(PyObject* o, const char* fn, size_t k) {
  // pybind11's float caster (convert pass): floats, ints and objects with __float__
  double v = PyFloat_AsDouble(o);
  if (v == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    type_error(std::string(fn) + "(): argument " + std::to_string(k) + " must be float");
  }
  return v;
}

bool to_bool(PyObject* o, const char* fn, size_t k) {
  // pybind11's bool caster (convert pass): True/False, None as false, anything with nb_bool
  if (o == Py_True) return true;
  if (o == Py_False || o == Py_None) return false;
  PyNumberMethods* num = Py_TYPE(o)->tp_as_number;
  if (num && num->nb_bool) {
    int r = num->nb_bool(o);
    if (r == 0 || r == 1) return r == 1;
    PyErr_Clear();
  }
  type_error(std::string(fn) + "(): argument " + std::to_string(k) + " must be bool");
}

template <class F>
auto seq(PyObject* o, const char* fn, size_t k, F each) {
  // pybind11's list caster: any sequence but str and bytes
  if (PyUnicode_Check(o) || PyBytes_Check(o) || !PySequence_Check(o))
    type_error(std::string(fn) + "(): argument " + std::to_string(k) + " must be a sequence");
  py::sequence s = py::reinterpret_borrow<py::sequence>(o);
  std::vector<decltype(each(o))> out;
  for (auto item : s) out.push_back(each(item.ptr()));
  return out;
}

c10::IValue to_ivalue(PyObject* o, char code, const char* fn, size_t k) {
  switch (code) {
    case 'T':
      if (!is_tensor(o)) type_error(std::string(fn) + "(): argument " + std::to_string(k) + " must be a Tensor");
      return THPVariable_Unpack(o);
    case 'O':
      if (o == Py_None) return c10::IValue();
      if (!is_tensor(o)) type_error(std::string(fn) + "(): argument " + std::to_string(k) + " must be a Tensor or None");
      return THPVariable_Unpack(o);
    case 'i': return to_int(o, fn, k);
    case 'd': return to_double(o, fn, k);
    case 'b': return to_bool(o, fn, k);
    case 's':
      if (!PyUnicode_Check(o)) type_error(std::string(fn) + "(): argument " + std::to_string(k) + " must be str");
      return std::string(PyUnicode_AsUTF8(o));
    case 'I': return seq(o, fn, k, [&](PyObject* x) { return to_int(x, fn, k); });
    case 'D': return seq(o, fn, k, [&](PyObject* x) { return to_double(x, fn, k); });
    case 'L':
      return seq(o, fn, k, [&](PyObject* x) {
        if (!is_tensor(x)) type_error(std::string(fn) + "(): argument " + std::to_string(k) + " must hold Tensors");
        return THPVariable_Unpack(x);
      });
  }
  type_error(std::string(fn) + "(): parameter type code '" + std::string(1, code) + "' is not known");
}

Lib* lib_of(py::capsule c) { return static_cast<Lib*>(c.get_pointer()); }

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.attr("version") = dice_bind::kVersion;
  m.def("open", [](const std::string& path) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) throw py::import_error(std::string("cannot load the extension: ") + dlerror());
    using TableFn = const dice_bind::Entry* (*)(int*, int*);
    auto table = reinterpret_cast<TableFn>(dlsym(h, "dice_bind_table"));
    if (!table) throw py::import_error("the extension has no dice_bind_table");
    auto* lib = new Lib();
    int version = 0;
    lib->handle = h;
    lib->entries = table(&lib->n, &version);
    if (version != dice_bind::kVersion)
      throw py::import_error("the extension was built for another dice_bind version");
    // never dlclose'd: the extension lives as long as the process, as an imported module does
    return py::capsule(lib, "dice_bind.lib");
  });
  m.def("table", [](py::capsule c) {
    Lib* lib = lib_of(c);
    py::list out;
    for (int i = 0; i < lib->n; ++i)
      out.append(py::make_tuple(lib->entries[i].name, lib->entries[i].doc, lib->entries[i].args));
    return out;
  });
  m.def("call", [](py::capsule c, int i, py::tuple args) -> py::object {
    Lib* lib = lib_of(c);
    if (i < 0 || i >= lib->n) throw py::index_error("no such function");
    const dice_bind::Entry& e = lib->entries[i];
    const std::string codes = e.args;
    if (args.size() != codes.size())
      type_error(std::string(e.name) + "(): takes " + std::to_string(codes.size()) + " positional argument(s), " +
                 std::to_string(args.size()) + " given");
    dice_bind::Stack stack;
    stack.reserve(codes.size());
    for (size_t k = 0; k < codes.size(); ++k) stack.push_back(to_ivalue(args[k].ptr(), codes[k], e.name, k));
    {
      HANDLE_TH_ERRORS
      e.call(stack);
      END_HANDLE_TH_ERRORS_PYBIND
    }
    return torch::jit::toPyObject(std::move(stack.at(0)));
  });
}
