set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/ablation/stories260K-+qk/ppl_tinystories-valid.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-valid)'
set title 'stories260K'
plot 3.815771676102655 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 5.349842190501249
20 11.234919468072091
30 28.570549372239544
40 69.30898420053511
e
