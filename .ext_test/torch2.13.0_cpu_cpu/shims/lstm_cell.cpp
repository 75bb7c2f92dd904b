#include "/work/main/csrc/lstm_cell.cpp"
