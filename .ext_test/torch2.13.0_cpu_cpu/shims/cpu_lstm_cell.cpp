#include "/work/main/csrc/cpu/lstm_cell.cpp"
