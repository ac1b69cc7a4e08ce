// Minimal CPython extension that links against libc10 (see abi_mismatch_ext.sh).
#include <Python.h>
#include <string>

namespace c10 { namespace detail {
[[noreturn]] void torchCheckFail(const char* func, const char* file, unsigned line, const std::string& msg);
}}

static PyObject* rmsnorm_check(PyObject*, PyObject* arg) {
    if (PyLong_AsLong(arg) < 0)
        c10::detail::torchCheckFail(__func__, __FILE__, __LINE__, std::string("negative hidden size"));
    Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {{"rmsnorm_check", rmsnorm_check, METH_O, nullptr}, {nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef mod = {PyModuleDef_HEAD_INIT, "fused_rmsnorm_ext", nullptr, -1, methods};
PyMODINIT_FUNC PyInit_fused_rmsnorm_ext(void) { return PyModule_Create(&mod); }
