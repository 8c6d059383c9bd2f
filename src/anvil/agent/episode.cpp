// episode.cpp: placeholder, being written.
