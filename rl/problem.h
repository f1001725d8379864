// rl's names for the task record that datasets/ produces (datasets/problem.h): rewards, rollouts, SFT and
// eval take a Problem and switch on its TaskKind.
#pragma once
#include "datasets/problem.h"

namespace pulse::rl {

using datasets::Problem;
using datasets::TaskKind;

}  // namespace pulse::rl
