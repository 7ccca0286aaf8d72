set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/TinyStories-656K-+qk/ppl_tinystories-test.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-test)'
set title 'TinyStories-656K'
plot 27.733049124048073 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 31.63005165082272
20 41.43994121443567
30 65.36545565173537
40 109.77808941984335
e
