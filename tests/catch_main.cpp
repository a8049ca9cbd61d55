// Catch2's main, compiled once: the test files then build quickly.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
