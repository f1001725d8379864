// Catch2 v2 main for every test executable. PULSE_SHARED_DIR points at ../shared (real datasets and
// model files made by other projects); PULSE_SOURCE_DIR at the checkout.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
