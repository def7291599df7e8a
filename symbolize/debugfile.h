/* debugfile.h - debug files with compressed sections, inflated for libdw. */
#ifndef MLZ_DEBUGFILE_H
#define MLZ_DEBUGFILE_H

/* fd, an open ELF file: if it has zlib-compressed sections, a memfd holding
 * the same file with them inflated (fd is then closed); otherwise fd. */
int sym_debug_inflated(int fd);

#endif
