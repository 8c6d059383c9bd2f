// http.cpp: placeholder, being written.
