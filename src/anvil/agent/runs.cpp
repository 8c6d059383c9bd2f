// runs.cpp: placeholder, being written.
