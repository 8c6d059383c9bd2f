// trajectory.cpp: placeholder, being written.
