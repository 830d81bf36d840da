/*
 * cuda.c: loads the CUDA driver (libcuda.so.1) with dlopen and resolves the
 * entry points of TSR_CU_FUNCS (cuda_impl.h).  Costs one dlopen and ~40
 * dlsym calls per context; nothing here runs per launch.
 */
#include "cuda_impl.h"

#include <dlfcn.h>
#include <string.h>

/* cuda.h maps API names to versioned symbols (cuMemAlloc -> cuMemAlloc_v2);
 * expanding the macro before stringifying gives the symbol to look up. */
#define TSR_STR(x) #x
#define TSR_XSTR(x) TSR_STR(x)

tsr_status tsri_cu_open(tsr_cu *cu, tsr_error *err)
{
  void *lib;
  memset(cu, 0, sizeof *cu);
  lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    return tsr_error_set(err, TSR_ERR_NO_DEVICE, "cannot load the CUDA driver 'libcuda.so.1': %s",
                         e ? e : "not found");
  }
  cu->lib = lib;
#define TSR_CU_RESOLVE(f)                                                                  \
  {                                                                                       \
    void *sym = dlsym(lib, TSR_XSTR(f));                                                 \
    if (!sym) {                                                                           \
      tsri_cu_close(cu);                                                                   \
      return tsr_error_set(err, TSR_ERR_NO_DEVICE,                                        \
                           "CUDA driver 'libcuda.so.1' lacks '%s': driver too old",       \
                           TSR_XSTR(f));                                                  \
    }                                                                                     \
    memcpy(&cu->f, &sym, sizeof sym);                                                     \
  }
  TSR_CU_FUNCS(TSR_CU_RESOLVE)
#undef TSR_CU_RESOLVE
  return TSR_OK;
}

void tsri_cu_close(tsr_cu *cu)
{
  if (cu && cu->lib) dlclose(cu->lib);
  if (cu) memset(cu, 0, sizeof *cu);
}

tsr_status tsri_cu_check(const tsr_cu *cu, CUresult r, const char *what, tsr_error *err)
{
  const char *text = NULL;
  if (r == CUDA_SUCCESS) return TSR_OK;
  if (cu && cu->cuGetErrorString) cu->cuGetErrorString(r, &text);
  if (r == CUDA_ERROR_NO_DEVICE)
    return tsr_error_set(err, TSR_ERR_NO_DEVICE, "%s failed: %s (error %d)", what,
                         text ? text : "no CUDA device", (int)r);
  return tsr_error_set(err, TSR_ERR_CUDA, "%s failed: %s (error %d)", what,
                       text ? text : "unknown error", (int)r);
}
