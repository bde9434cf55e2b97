# examples/vpm_dma.py --rows 16 as text (python examples/vpm_dma.py > examples/vpm_dma.s). Run it on src.npy (16x16 uint32):
#   python -c "import numpy as np; np.save('src.npy', 3 * np.arange(256, dtype=np.uint32).reshape(16, 16))"
#   vc4nn run examples/vpm_dma.s --input src=src.npy --buffer dst=16x16 --uniforms src dst --dump dst
    mov ra0, uniform                                 # 0x0000
    mov ra1, uniform                                 # 0x0008
    ldi vr_setup, 0x83001000                         # 0x0010
    mov vr_addr, ra0                                 # 0x0018
    read vr_wait                                     # 0x0020
    ldi vr_setup, 0x00001a00                         # 0x0028
    ldi vw_setup, 0x00001a00                         # 0x0030
    mov r0, vpm                                      # 0x0038
    add r0, r0, r0                                   # 0x0040
    add vpm, r0, 1                                   # 0x0048
    mov r0, vpm                                      # 0x0050
    add r0, r0, r0                                   # 0x0058
    add vpm, r0, 1                                   # 0x0060
    mov r0, vpm                                      # 0x0068
    add r0, r0, r0                                   # 0x0070
    add vpm, r0, 1                                   # 0x0078
    mov r0, vpm                                      # 0x0080
    add r0, r0, r0                                   # 0x0088
    add vpm, r0, 1                                   # 0x0090
    mov r0, vpm                                      # 0x0098
    add r0, r0, r0                                   # 0x00a0
    add vpm, r0, 1                                   # 0x00a8
    mov r0, vpm                                      # 0x00b0
    add r0, r0, r0                                   # 0x00b8
    add vpm, r0, 1                                   # 0x00c0
    mov r0, vpm                                      # 0x00c8
    add r0, r0, r0                                   # 0x00d0
    add vpm, r0, 1                                   # 0x00d8
    mov r0, vpm                                      # 0x00e0
    add r0, r0, r0                                   # 0x00e8
    add vpm, r0, 1                                   # 0x00f0
    mov r0, vpm                                      # 0x00f8
    add r0, r0, r0                                   # 0x0100
    add vpm, r0, 1                                   # 0x0108
    mov r0, vpm                                      # 0x0110
    add r0, r0, r0                                   # 0x0118
    add vpm, r0, 1                                   # 0x0120
    mov r0, vpm                                      # 0x0128
    add r0, r0, r0                                   # 0x0130
    add vpm, r0, 1                                   # 0x0138
    mov r0, vpm                                      # 0x0140
    add r0, r0, r0                                   # 0x0148
    add vpm, r0, 1                                   # 0x0150
    mov r0, vpm                                      # 0x0158
    add r0, r0, r0                                   # 0x0160
    add vpm, r0, 1                                   # 0x0168
    mov r0, vpm                                      # 0x0170
    add r0, r0, r0                                   # 0x0178
    add vpm, r0, 1                                   # 0x0180
    mov r0, vpm                                      # 0x0188
    add r0, r0, r0                                   # 0x0190
    add vpm, r0, 1                                   # 0x0198
    mov r0, vpm                                      # 0x01a0
    add r0, r0, r0                                   # 0x01a8
    add vpm, r0, 1                                   # 0x01b0
    ldi vw_setup, 0x88104000                         # 0x01b8
    ldi vw_setup, 0xc0000000                         # 0x01c0
    mov vw_addr, ra1                                 # 0x01c8
    read vw_wait                                     # 0x01d0
    mov host_int, 1                                  # 0x01d8
    thrend                                           # 0x01e0
    nop                                              # 0x01e8
    nop                                              # 0x01f0
