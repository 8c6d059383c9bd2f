// tools.cpp: placeholder, being written.
