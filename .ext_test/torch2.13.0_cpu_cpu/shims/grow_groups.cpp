#include "/work/main/csrc/grow_groups.cpp"
