# ddl.torch's backend, ddl.jax's XLA handlers and ddl.tensorflow's ops, built against the
# frameworks that ${Python_EXECUTABLE}'s environment has (find_package(Python) first), by one
# CMake definition for both builds that make them:
#   - the wheel (bindings/python/CMakeLists.txt), which installs them into the package;
#   - the project's own build when DDL_PYTHON names an interpreter (CMakeLists.txt): a checkout's
#     package loads them from the build directory it loaded libddl from (ddl/_framework.py),
#     instead of compiling them at first use, which made the first test to touch torch 40 s
#     longer than the others.
#
# ddl_framework_modules(OUT_DIR RESULT): for each framework present, a MODULE target whose file
# goes to OUT_DIR/<package>/ beside a _build_info.py naming the framework's version (the
# package refuses or skips a module built for another); RESULT gets "target:package" per module.
# The flags are the modules' own (the frameworks' headers warn, none of it ddl's), not the
# directory's warnings-as-errors.
function(ddl_framework_modules out_dir result)
  set(built "")

  # torch: its include and library paths and C++ ABI as torch.utils.cpp_extension gives them.
  ddl_ask_python(torch_info "import torch, torch.utils.cpp_extension as c; print(torch.__version__); print('|'.join(c.include_paths())); print('|'.join(c.library_paths())); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))")
  if(torch_info)
    list(GET torch_info 0 torch_version)
    list(GET torch_info 1 torch_includes)
    list(GET torch_info 2 torch_libdirs)
    list(GET torch_info 3 torch_abi)
    string(REPLACE "|" ";" torch_includes "${torch_includes}")
    string(REPLACE "|" ";" torch_libdirs "${torch_libdirs}")
    message(STATUS "ddl.torch: building the backend against torch ${torch_version}")
    Python_add_library(_torch_backend MODULE WITH_SOABI
                       ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/ddl/torch/backend.cpp)
    # torch 2.10 and later need C++20 in their headers (as torch.utils.cpp_extension passes).
    # Hidden symbols but PyInit (pybind11's own types are hidden; a visible class holding one
    # is a warning).
    set_target_properties(_torch_backend PROPERTIES CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON
                          CXX_EXTENSIONS OFF CXX_VISIBILITY_PRESET hidden
                          VISIBILITY_INLINES_HIDDEN ON)
    target_include_directories(_torch_backend SYSTEM PRIVATE ${torch_includes})
    target_compile_definitions(_torch_backend PRIVATE TORCH_EXTENSION_NAME=_torch_backend
                               TORCH_API_INCLUDE_EXTENSION_H _GLIBCXX_USE_CXX11_ABI=${torch_abi})
    set_property(TARGET _torch_backend PROPERTY COMPILE_OPTIONS -O2)
    target_link_directories(_torch_backend PRIVATE ${torch_libdirs})
    target_link_libraries(_torch_backend PRIVATE c10 torch torch_cpu torch_python ${CMAKE_DL_LIBS})
    ddl_framework_module(_torch_backend torch TORCH_VERSION ${torch_version})
  else()
    message(STATUS "ddl.torch: no torch in ${Python_EXECUTABLE}'s environment; no backend built")
  endif()

  ddl_ask_python(jax_info "import jax, jax.ffi; print(jax.__version__); print(jax.ffi.include_dir())")
  if(jax_info)
    list(GET jax_info 0 jax_version)
    list(GET jax_info 1 jax_include)
    message(STATUS "ddl.jax: building the XLA handlers against jax ${jax_version}")
    ddl_plain_module(_ffi_calls ddl/jax/ffi_calls.cc)
    set_property(TARGET _ffi_calls PROPERTY COMPILE_OPTIONS "")
    target_include_directories(_ffi_calls SYSTEM PRIVATE ${jax_include})
    ddl_framework_module(_ffi_calls jax JAX_VERSION ${jax_version})
  else()
    message(STATUS "ddl.jax: no jax in ${Python_EXECUTABLE}'s environment; compiled at first use")
  endif()

  ddl_ask_python(tf_info "import os; os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'; import tensorflow as tf; print(tf.__version__); print('|'.join(tf.sysconfig.get_compile_flags())); print('|'.join(tf.sysconfig.get_link_flags()))")
  if(tf_info)
    list(GET tf_info 0 tf_version)
    list(GET tf_info 1 tf_compile)
    list(GET tf_info 2 tf_link)
    string(REPLACE "|" ";" tf_compile "${tf_compile}")
    string(REPLACE "|" ";" tf_link "${tf_link}")
    message(STATUS "ddl.tensorflow: building the ops against TensorFlow ${tf_version}")
    ddl_plain_module(_ops ddl/tensorflow/ops.cc)
    # TensorFlow's flags (include dir, C++ standard, ABI) as tf.sysconfig gives them.
    set_property(TARGET _ops PROPERTY COMPILE_OPTIONS ${tf_compile} -w -O2)
    target_link_options(_ops PRIVATE ${tf_link})
    ddl_framework_module(_ops tensorflow TF_VERSION ${tf_version})
  else()
    message(STATUS "ddl.tensorflow: no TensorFlow in ${Python_EXECUTABLE}'s environment; compiled at first use")
  endif()
  set(${result} "${built}" PARENT_SCOPE)
endfunction()

# The lines `code` prints, run by ${Python_EXECUTABLE} in isolated mode (`-I`: no PYTHON*
# variables, so none of pip's build isolation: the environment's own site-packages), as a list;
# empty when it fails (the framework is not there).
function(ddl_ask_python result code)
  execute_process(COMMAND ${Python_EXECUTABLE} -I -c "${code}" RESULT_VARIABLE failed
                  OUTPUT_VARIABLE lines ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(list "")
  if(failed EQUAL 0)
    string(REPLACE "\n" ";" list "${lines}")
  endif()
  set(${result} "${list}" PARENT_SCOPE)
endfunction()

# A C++17 module loaded by ctypes or the framework's loader (no "lib" prefix, no Python
# symbols), `source` under this directory, which it includes from (ddl/...).
macro(ddl_plain_module target source)
  add_library(${target} MODULE ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/${source})
  set_target_properties(${target} PROPERTIES PREFIX "" CXX_STANDARD 17 CXX_STANDARD_REQUIRED ON
                        CXX_EXTENSIONS OFF)
  target_include_directories(${target} PRIVATE ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/ddl)
  target_link_libraries(${target} PRIVATE ${CMAKE_DL_LIBS})
endmacro()

# One module's place: OUT_DIR/<package>/, with _build_info.py (VERSION_NAME = "version").
macro(ddl_framework_module target package version_name version)
  set_target_properties(${target} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${out_dir}/${package})
  file(WRITE ${out_dir}/${package}/_build_info.py
       "# Written by bindings/python/frameworks.cmake when the module beside it was configured.\n"
       "${version_name} = \"${version}\"\n")
  list(APPEND built ${target}:${package})
endmacro()
