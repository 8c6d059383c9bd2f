// file_tools.cpp: placeholder, being written.
