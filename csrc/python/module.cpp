// The Python module `cherry._C` built at install (setup.py). It exports nothing: importing it loads this
// shared library, whose static initialisers (TORCH_LIBRARY_FRAGMENT / TORCH_LIBRARY_IMPL in the other
// translation units) register the `torch.ops.cherry.*` schemas and kernels with the dispatcher.
// Only Python.h is included, so this file costs a fraction of a second to compile. The JIT build
// (cherry/ops/extension.py) loads its library with torch.ops.load_library and does not use this file.
#include <Python.h>

extern "C" PyMODINIT_FUNC PyInit__C(void) {
  static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "_C", "Cherry's native ops (torch.ops.cherry)",
                                          -1, nullptr};
  return PyModule_Create(&module_def);
}
