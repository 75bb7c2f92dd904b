#include "/work/main/csrc/refine_groups.cpp"
