#pragma once
#ifndef SCALE
#define SCALE 1
#endif
