# examples/hello.py as text (python examples/hello.py > examples/hello.s). Run it:
#   vc4nn run examples/hello.s --qpus 12 --buffer out=12x16 --uniforms 'out[q]' q --dump out
    mov ra0, uniform                                 # 0x0000
    mov r1, uniform                                  # 0x0008
    shl r1, r1, 4                                    # 0x0010
    add r0, r1, element_number                       # 0x0018
    read mutex_acquire                               # 0x0020
    ldi vw_setup, 0x00001a00                         # 0x0028
    mov vpm, r0                                      # 0x0030
    ldi vw_setup, 0x80904000                         # 0x0038
    ldi vw_setup, 0xc0000000                         # 0x0040
    mov vw_addr, ra0                                 # 0x0048
    read vw_wait                                     # 0x0050
    mov mutex_release, 1                             # 0x0058
    mov host_int, 1                                  # 0x0060
    thrend                                           # 0x0068
    nop                                              # 0x0070
    nop                                              # 0x0078
