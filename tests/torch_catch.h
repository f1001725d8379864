// Catch2 for a test unit that includes LibTorch: include this instead of <catch2/catch.hpp>, before any
// other project header (CMakeLists.txt checks it at configure time).
// c10's logging header defines a one-argument CHECK(condition) (c10/util/logging_is_not_google_glog.h, or
// glog's); whichever of it and Catch2's CHECK(...) comes second wins. When c10's wins, every CHECK whose
// expression holds a comma fails to compile ("macro CHECK passed 2 arguments, but takes just 1": LibTorch
// 2.6 without the precompiled header, issue 30). So c10's comes first, is dropped, and Catch2's is the one
// left; c10's include guard keeps any later LibTorch header from defining it again. Nothing here uses c10's.
#pragma once
#ifdef CATCH_VERSION_MAJOR
#error "tests/torch_catch.h must come before <catch2/catch.hpp> (and before headers that include it)"
#endif
#include <c10/util/Logging.h>
#undef CHECK
#include <catch2/catch.hpp>
