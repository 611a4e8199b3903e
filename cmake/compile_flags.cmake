# The build types' flags and the compiler launcher, shared by the project's build
# (CMakeLists.txt) and the wheel's (bindings/python/CMakeLists.txt), so that one compile of a
# file serves both.
#
# RelWithDebInfo, both builds' type: Release's -O3 (the reduction kernels are loops the
# compiler vectorizes) with debug info, which the wheel strips when it installs
# (scikit-build-core's install.strip).
set(CMAKE_CXX_FLAGS_RELWITHDEBINFO "-O3 -g -DNDEBUG")
set(CMAKE_C_FLAGS_RELWITHDEBINFO "-O2 -g -DNDEBUG")

# ccache where it is installed (scripts/install-deps.sh installs it): a wheel built after
# scripts/build.sh (tests/install/test_wheel.sh, or a developer's pip install) gets the objects
# of the same sources compiled with the same flags from the cache. hash_dir off: with -g,
# ccache would otherwise key every object on its build directory, which differs between the two
# builds (a cached object's debug info then names the first build's directory).
option(DDL_CCACHE "Compile through ccache when it is installed" ON)
find_program(DDL_CCACHE_PROGRAM ccache)
if(DDL_CCACHE AND DDL_CCACHE_PROGRAM AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(launcher ${CMAKE_COMMAND} -E env CCACHE_NOHASHDIR=true CCACHE_DEPEND=true ${DDL_CCACHE_PROGRAM})
  set(CMAKE_C_COMPILER_LAUNCHER ${launcher})
  set(CMAKE_CXX_COMPILER_LAUNCHER ${launcher})
endif()
