/*
 * start.S - cnk's entry point, the way into the program, the clone
 * trampoline and the signal restorer.  Everything here runs in cnk's text,
 * which the seccomp filter lets make system calls.
 */
#include <asm/unistd.h>

    .text

/* _start: relocate ourselves before any C code reads a global pointer,
 * then cnk_main(original stack pointer: argc, argv..., envp..., auxv). */
    .globl _start
    .type _start, @function
_start:
    xor %ebp, %ebp
    mov %rsp, %r12
    lea __ehdr_start(%rip), %rdi
    lea _DYNAMIC(%rip), %rsi
    and $-16, %rsp
    call cnk_reloc
    mov %r12, %rdi
    call cnk_main
    hlt
    .size _start, . - _start

/* enter_program(entry, sp): the state the kernel gives a new process:
 * rsp at argc, rdx = 0 (no atexit function), other registers cleared. */
    .globl enter_program
    .hidden enter_program
    .type enter_program, @function
enter_program:
    mov %rsi, %rsp
    push %rdi
    xor %eax, %eax
    xor %ebx, %ebx
    xor %ecx, %ecx
    xor %edx, %edx
    xor %esi, %esi
    xor %edi, %edi
    xor %ebp, %ebp
    xor %r8d, %r8d
    xor %r9d, %r9d
    xor %r10d, %r10d
    xor %r11d, %r11d
    xor %r12d, %r12d
    xor %r13d, %r13d
    xor %r14d, %r14d
    xor %r15d, %r15d
    ret                 /* pops entry: rsp is back at argc */
    .size enter_program, . - enter_program

/* long cnk_clone(flags, frame, ptid, ctid, tls): the child starts on the
 * new stack `frame`, a struct clone_frame (thread.c) whose last word,
 * rip, sits just below the program's child stack pointer.  It makes its
 * block its %gs (lib.h), takes the program's signal mask (it started with
 * every signal blocked), pops the trapped registers, gets rax = 0 and
 * returns to the trapped rip with rsp = the program's child stack, as if
 * clone had run there. */
    .globl cnk_clone
    .hidden cnk_clone
    .type cnk_clone, @function
cnk_clone:
    mov %rcx, %r10
    mov $__NR_clone, %eax
    syscall
    test %rax, %rax
    jnz 1f
    pop %rsi                    /* frame->kthread */
    mov %rsi, (%rsi)            /* its self pointer, %gs:0 */
    mov $0x1001, %edi           /* ARCH_SET_GS */
    mov $__NR_arch_prctl, %eax
    syscall
    mov $2, %edi                /* SIG_SETMASK, frame->sigmask */
    mov %rsp, %rsi
    xor %edx, %edx
    mov $8, %r10d
    mov $__NR_rt_sigprocmask, %eax
    syscall
    add $8, %rsp
    pop %r8
    pop %r9
    pop %r10
    pop %r11
    pop %r12
    pop %r13
    pop %r14
    pop %r15
    pop %rdi
    pop %rsi
    pop %rbp
    pop %rbx
    pop %rdx
    pop %rcx
    xor %eax, %eax
    popfq
    ret
1:  ret
    .size cnk_clone, . - cnk_clone

/* The SIGSYS handler's sa_restorer. */
    .globl cnk_restorer
    .hidden cnk_restorer
    .type cnk_restorer, @function
cnk_restorer:
    mov $__NR_rt_sigreturn, %eax
    syscall
    hlt
    .size cnk_restorer, . - cnk_restorer

/* int cnk_setjmp(struct kjmp *j) / cnk_longjmp(j, val): the loader's way
 * back to a failing execve while the old program is still intact.  Saves
 * the callee-saved registers, the stack pointer and the return address. */
    .globl cnk_setjmp
    .hidden cnk_setjmp
    .type cnk_setjmp, @function
cnk_setjmp:
    mov %rbx, 0(%rdi)
    mov %rbp, 8(%rdi)
    mov %r12, 16(%rdi)
    mov %r13, 24(%rdi)
    mov %r14, 32(%rdi)
    mov %r15, 40(%rdi)
    lea 8(%rsp), %rdx
    mov %rdx, 48(%rdi)
    mov (%rsp), %rdx
    mov %rdx, 56(%rdi)
    xor %eax, %eax
    ret
    .size cnk_setjmp, . - cnk_setjmp

    .globl cnk_longjmp
    .hidden cnk_longjmp
    .type cnk_longjmp, @function
cnk_longjmp:
    mov 0(%rdi), %rbx
    mov 8(%rdi), %rbp
    mov 16(%rdi), %r12
    mov 24(%rdi), %r13
    mov 32(%rdi), %r14
    mov 40(%rdi), %r15
    mov 48(%rdi), %rsp
    mov %esi, %eax
    jmp *56(%rdi)
    .size cnk_longjmp, . - cnk_longjmp

/* cnk_on_stack(top, fn, arg): run fn(arg) on another stack, never to come
 * back (execve leaves the old program's stack, in big memory, for good). */
    .globl cnk_on_stack
    .hidden cnk_on_stack
    .type cnk_on_stack, @function
cnk_on_stack:
    and $-16, %rdi
    mov %rdi, %rsp
    mov %rdx, %rdi
    xor %ebp, %ebp
    call *%rsi
    hlt
    .size cnk_on_stack, . - cnk_on_stack

    .section .note.GNU-stack, "", @progbits
