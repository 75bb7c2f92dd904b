#include "/work/main/csrc/cpu/refine_groups.cpp"
